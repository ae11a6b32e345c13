package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-redis/redis_rate/v10"

	"github.com/casebook-dev/casebook/shortlink"
)

// configFlags registers a flag on fs for every shortlink.Config setting
// that changes behaviour (left unset, each takes the library's default) and
// returns the Config they fill once fs is parsed. TestEveryConfigFieldIsAFlag
// keeps the list whole.
func configFlags(fs *flag.FlagSet) *shortlink.Config {
	cfg := &shortlink.Config{}
	fs.Func("codes", "code style: permuted (fixed length, keyed permutation) or snowflake (11 characters) [permuted]", func(v string) error {
		switch v {
		case "permuted":
			cfg.Codes = shortlink.PermutedCodes
		case "snowflake":
			cfg.Codes = shortlink.SnowflakeCodes
		default:
			return fmt.Errorf("%q: want permuted or snowflake", v)
		}
		return nil
	})
	fs.IntVar(&cfg.CodeLength, "code-length", 0, "length of permuted codes [7]")
	fs.Int64Var(&cfg.SnowflakeNode, "snowflake-node", 0, "this process's node id for snowflake codes (0..1023)")
	fs.Int64Var(&cfg.SegmentStep, "segment-step", 0, "counters one lease from SQL holds [1000]")
	fs.IntVar(&cfg.TablesPerDB, "tables-per-db", 0, "link tables in the database [256]")
	fs.IntVar(&cfg.Redirect, "redirect", 0, "default redirect status: 301, 302, 307 or 308 [302]")
	fs.DurationVar(&cfg.PermanentMaxAge, "permanent-max-age", 0, "Cache-Control max-age of 301/308 redirects [24h]")
	fs.DurationVar(&cfg.TemporaryMaxAge, "temporary-max-age", 0, "Cache-Control max-age of 302/307 redirects [0]")
	fs.DurationVar(&cfg.LocalTTL, "local-ttl", 0, "how long this process serves a link from memory after it changed elsewhere; negative: no local cache [10s]")
	fs.DurationVar(&cfg.RedisTTL, "redis-ttl", 0, "how long Redis keeps a link [24h]")
	fs.DurationVar(&cfg.NegativeTTL, "negative-ttl", 0, "how long a miss is remembered [30s]")
	fs.Int64Var(&cfg.LocalEntries, "local-entries", 0, "links in the in-process cache [100000]")
	fs.Func("create-limit", "links a client IP may create, as N/s, N/m or N/h [10/s]", limitFlag(&cfg.CreateLimit))
	fs.Func("miss-limit", "404s a client IP may cause, as N/s, N/m or N/h [60/m]", limitFlag(&cfg.MissLimit))
	fs.BoolVar(&cfg.SharedMissCheck, "shared-miss-check", false, "read a client's miss budget from Redis before every lookup, not only after it missed here lately (see shortlink.Config.SharedMissCheck for the trade-off)")
	fs.IntVar(&cfg.LocalMissClients, "local-miss-clients", 0, "clients the local miss filter holds [1000000]")
	fs.DurationVar(&cfg.FlushEvery, "flush-every", 0, "how often counted clicks and the analytics rollup are written to SQL [1s]")
	fs.BoolVar(&cfg.NoAnalytics, "no-analytics", false, "record no per-link analytics (referrer, device, country, UTM, uniques; on by default)")
	fs.IntVar(&cfg.AnalyticsValues, "analytics-values", 0, "distinct values of one dimension kept per link and hour between flushes; the rest count as (other) [100]")
	fs.DurationVar(&cfg.UniquesTTL, "uniques-ttl", 0, "how long a day's unique-visitor HyperLogLog is kept in Redis after the day [9600h = 400 days]")
	fs.Func("own-hosts", "further host names of this service, comma-separated (refused as targets)", listFlag(&cfg.OwnHosts))
	fs.Func("domains", "further short domains this deployment serves, comma-separated (the -base host is the default; redirects resolve by Host)", listFlag(&cfg.Domains))
	fs.Func("blocklist", "domains refused as targets, comma-separated", listFlag(&cfg.Blocklist))
	fs.Func("reserved", "aliases nobody may take, comma-separated (added to the defaults)", listFlag(&cfg.Reserved))
	return cfg
}

// limitFlag parses "N/s", "N/m" or "N/h" into a rate with a burst of N.
func limitFlag(l *redis_rate.Limit) func(string) error {
	return func(v string) error {
		n, per, ok := strings.Cut(v, "/")
		rate, err := strconv.Atoi(n)
		if !ok || err != nil || rate < 1 {
			return fmt.Errorf("%q: want N/s, N/m or N/h with N ≥ 1", v)
		}
		switch per {
		case "s":
			*l = redis_rate.PerSecond(rate)
		case "m":
			*l = redis_rate.PerMinute(rate)
		case "h":
			*l = redis_rate.PerHour(rate)
		default:
			return fmt.Errorf("%q: want N/s, N/m or N/h", v)
		}
		return nil
	}
}

func listFlag(xs *[]string) func(string) error {
	return func(v string) error {
		for _, x := range strings.Split(v, ",") {
			if x = strings.TrimSpace(x); x != "" {
				*xs = append(*xs, x)
			}
		}
		return nil
	}
}
