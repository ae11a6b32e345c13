package main

import (
	"flag"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/casebook-dev/casebook/shortlink"
)

// Every field of shortlink.Config is a flag, but for those a flag cannot
// carry or this program sets itself.
func TestEveryConfigFieldIsAFlag(t *testing.T) {
	notFlags := map[string]string{
		"BaseURL": "-base", "Namespace": "fixed", "CodeKey": "a secret, drawn and stored in SQL",
		"LocalMissFilter": "deprecated, no effect", "OnError": "a func", "Country": "a func (the default reads CF-IPCountry, then X-Country)", "Logger": "a logger", "Now": "a clock", "MeterProvider": "a provider", "TracerProvider": "a provider",
	}
	fs := flag.NewFlagSet("shortlink", flag.ContinueOnError)
	cfg := configFlags(fs)
	// Setting every flag must change every field it covers.
	args := []string{"-codes", "snowflake", "-code-length", "9", "-snowflake-node", "3", "-segment-step", "50", "-tables-per-db", "16",
		"-redirect", "301", "-permanent-max-age", "1h", "-temporary-max-age", "5s", "-local-ttl", "2s", "-redis-ttl", "1h",
		"-negative-ttl", "3s", "-local-entries", "500", "-create-limit", "5/s", "-miss-limit", "30/m", "-shared-miss-check",
		"-local-miss-clients", "1000", "-flush-every", "2s", "-no-analytics", "-analytics-values", "20", "-uniques-ttl", "240h", "-own-hosts", "a.example, b.example", "-blocklist", "bad.example",
		"-reserved", "admin,api", "-domains", "x.example,y.example"}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(*cfg)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if _, ok := notFlags[name]; ok {
			continue
		}
		if v.Field(i).IsZero() {
			t.Errorf("Config.%s is set by no flag", name)
		}
	}
	want := shortlink.Config{Codes: shortlink.SnowflakeCodes, CodeLength: 9, SnowflakeNode: 3, SegmentStep: 50, TablesPerDB: 16,
		Redirect: 301, PermanentMaxAge: time.Hour, TemporaryMaxAge: 5 * time.Second, LocalTTL: 2 * time.Second, RedisTTL: time.Hour,
		NegativeTTL: 3 * time.Second, LocalEntries: 500, CreateLimit: redis_rate.PerSecond(5), MissLimit: redis_rate.PerMinute(30),
		SharedMissCheck: true, LocalMissClients: 1000, FlushEvery: 2 * time.Second,
		NoAnalytics: true, AnalyticsValues: 20, UniquesTTL: 240 * time.Hour,
		OwnHosts: []string{"a.example", "b.example"}, Blocklist: []string{"bad.example"}, Reserved: []string{"admin", "api"},
		Domains: []string{"x.example", "y.example"}}
	if !reflect.DeepEqual(*cfg, want) {
		t.Errorf("parsed %+v\nwant   %+v", *cfg, want)
	}
}

func TestBadFlagValuesRefused(t *testing.T) {
	for _, args := range [][]string{
		{"-codes", "sequential"}, {"-miss-limit", "30"}, {"-miss-limit", "0/m"}, {"-miss-limit", "30/d"},
		{"-create-limit", "x/s"}, {"-redirect", "three"}, {"-local-ttl", "10"}, {"-analytics-values", "many"},
	} {
		fs := flag.NewFlagSet("shortlink", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		configFlags(fs)
		if err := fs.Parse(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
