package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scenarios.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A scenario file plans exactly its loads and runs only the measurements
// they name.
func TestScenarioFilePlansItsLoads(t *testing.T) {
	path := writeFile(t, `{"scenarios": [
		{"name": "mine", "replicas": {"mysql": 2},
		 "loads": [
			{"name": "ids", "dau": 1e6, "per_user": 8.64, "peak_factor": 2, "measurement": "idgen.snowflake"},
			{"name": "routes", "per_day": 3.6e6, "window": "1h", "share": 0.5, "peak_factor": 1, "measurement": "shard.route"}],
		 "storage": [{"name": "rows", "per_day": 1e6, "retention_days": 10, "bytes_per_record": 100, "on": "mysql"}]},
		{"name": "theirs", "loads": [{"name": "codes", "per_day": 86400, "peak_factor": 3, "measurement": "idgen.shortcode"}]}]}`)
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"-scenario", path, "-json", "-duration", "10ms"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, errs.String())
	}
	var plan Plan
	if err := json.Unmarshal(out.Bytes(), &plan); err != nil {
		t.Fatal(err)
	}
	var measured []string
	for _, r := range plan.Measurements {
		measured = append(measured, r.Name)
	}
	if want := []string{"idgen.snowflake", "idgen.shortcode", "shard.route"}; !slices.Equal(measured, want) {
		t.Errorf("measured %v, want %v", measured, want)
	}
	got := map[string]float64{}
	for _, s := range plan.Scenarios {
		for _, z := range s.Sizings {
			got[s.Name+"/"+z.What+"/"+z.Measurement] = z.Peak
		}
	}
	want := map[string]float64{
		"mine/peak ids/s/idgen.snowflake":     2 * 100,            // 8.64M/day over 24h, ×2
		"mine/peak routes/s/shard.route":      3.6e6 * 0.5 / 3600, // half in one hour
		"theirs/peak codes/s/idgen.shortcode": 3,
	}
	if len(got) != len(want) {
		t.Errorf("sizings %v, want %v", got, want)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g < v*0.999999 || g > v*1.000001 {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
	mine := plan.Scenarios[0]
	if mine.Replication != (Replication{Redis: 1, MySQL: 2}) {
		t.Errorf("replication %+v, want the default Redis 1 and the file's MySQL 2", mine.Replication)
	}
	if len(mine.Storage) != 1 || mine.Storage[0].TotalBytes != 3*1e6*10*100 {
		t.Errorf("storage %+v, want 1 GB × 3 copies", mine.Storage)
	}
}

// The shipped sample is valid.
func TestExamplesFile(t *testing.T) {
	var known []string
	for _, m := range measurements() {
		known = append(known, m.Name)
	}
	ss, err := loadScenarioFile("examples.json", known)
	if err != nil || len(ss) != 2 {
		t.Fatalf("examples.json: %d scenarios, %v", len(ss), err)
	}
}

// A bad file exits 2 with a message naming the problem, before any backend
// is opened.
func TestBadScenarioFiles(t *testing.T) {
	const load = `{"name": "l", "per_day": 100, "peak_factor": 2, "measurement": "idgen.snowflake"}`
	wrap := func(loads string) string { return `{"scenarios": [{"name": "s", "loads": [` + loads + `]}]}` }
	cases := []struct{ file, want string }{
		{wrap(`{"name": "l", "per_day": 100, "peak_factor": 2, "measurement": "nope"}`), `unknown measurement "nope"`},
		{wrap(`{"name": "l", "per_day": -100, "peak_factor": 2, "measurement": "idgen.snowflake"}`), "negative volume"},
		{wrap(`{"name": "l", "dau": 10, "per_user": -1, "peak_factor": 2, "measurement": "idgen.snowflake"}`), "negative volume"},
		{wrap(`{"name": "l", "per_day": 100, "peak_factor": -2, "measurement": "idgen.snowflake"}`), "peak_factor -2"},
		{wrap(`{"name": "l", "per_day": 100, "share": -0.5, "peak_factor": 2, "measurement": "idgen.snowflake"}`), "share -0.5"},
		{wrap(`{"name": "l", "per_day": 100, "window": "48h", "peak_factor": 2, "measurement": "idgen.snowflake"}`), `window "48h"`},
		{wrap(`{"name": "l", "per_day": 100, "peak": 2, "measurement": "idgen.snowflake"}`), `unknown field "peak"`},
		{wrap(`{"name": "l", "per_day": 100, "dau": 5, "per_user": 1, "peak_factor": 2, "measurement": "idgen.snowflake"}`), "not both"},
		{`{"scenarios": [{"name": "s", "replicas": {"redis": -1}, "loads": [` + load + `]}]}`, "replicas.redis is -1"},
		{`{"scenarios": [{"name": "s", "loads": [` + load + `], "storage": [{"name": "x", "records": 10, "bytes_per_record": -5, "on": "redis"}]}]}`, "bytes_per_record -5"},
		{`{"scenarios": [{"name": "s", "loads": [` + load + `], "storage": [{"name": "x", "records": 10, "bytes_per_record": 5, "on": "disk"}]}]}`, `on "disk"`},
		{`{"scenarios": [{"name": "s", "loads": [` + load + `]}], "extra": 1}`, `unknown field "extra"`},
		{`{"scenarios": []}`, `no "scenarios"`},
		{`{"scenarios": [{"name": "s"}]}`, `no "loads"`},
		{`{"scenarios": [{"name": "s", "loads": [` + load + `]}]} {}`, "trailing data"},
	}
	for _, c := range cases {
		var out, errs bytes.Buffer
		code := run(context.Background(), []string{"-scenario", writeFile(t, c.file), "-duration", "10ms"}, &out, &errs)
		if code != 2 || !strings.Contains(errs.String(), c.want) || strings.Contains(errs.String(), "opening backends") {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", c.file, code, errs.String(), c.want)
		}
	}
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"-scenario", "/nonexistent.json"}, &out, &errs); code != 2 {
		t.Errorf("missing file: exit %d", code)
	}
}

// -only runs the named measurements and plans only the loads they size.
func TestOnly(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"-only", "idgen.snowflake", "-json", "-duration", "10ms"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, errs.String())
	}
	var plan Plan
	if err := json.Unmarshal(out.Bytes(), &plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Measurements) != 1 || plan.Measurements[0].Name != "idgen.snowflake" {
		t.Errorf("measurements %+v", plan.Measurements)
	}
	var names []string
	for _, s := range plan.Scenarios {
		names = append(names, s.Name)
		if len(s.Sizings) != 1 || s.Sizings[0].Measurement != "idgen.snowflake" {
			t.Errorf("%s: sizings %+v", s.Name, s.Sizings)
		}
	}
	if want := []string{"order & pay", "feed"}; !slices.Equal(names, want) {
		t.Errorf("scenarios %v, want %v", names, want)
	}
	errs.Reset()
	if code := run(context.Background(), []string{"-only", "idgen.snowflake,nope"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), `unknown measurement "nope"`) {
		t.Errorf("-only nope: exit %d, stderr %q", code, errs.String())
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		24 * time.Hour: "24h", 12 * time.Hour: "12h", 90 * time.Minute: "1h30m", 30 * time.Minute: "30m", 30 * time.Second: "30s", time.Second: "1s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
