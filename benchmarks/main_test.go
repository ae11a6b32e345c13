package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// Bad arguments exit 2 and say why, before any backend is opened.
func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"-duration", "0"}, {"-duration", "-1s"}, {"-duration", "11m"}, {"-duration", "soon"},
		{"extra"}, {"-json", "plan.json"}, {"-nope"},
		{"-utilisation", "0"}, {"-utilisation", "1.5"}, {"-utilisation", "NaN"},
		{"-html", "/nonexistent-dir/r.html"}, {"-html", t.TempDir()},
		{"-soak", "1s"}, {"-soak", "25h"}, {"-soak", "10s", "-json"}, {"-soak", "10s", "-only", "rank.add"},
		{"-soak", "10s", "-soak-rate", "0"},
	} {
		var out, errs bytes.Buffer
		if code := run(context.Background(), args, &out, &errs); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if errs.Len() == 0 || strings.Contains(errs.String(), "opening backends") {
			t.Errorf("%q: stderr %q", args, errs.String())
		}
	}
}

// An unreachable Redis fails its measurements: exit 1, each failure said
// once, no go-redis pool noise, the plan still printed with notes.
func TestUnreachableBackendFails(t *testing.T) {
	var out, errs bytes.Buffer
	code := run(context.Background(), []string{"-redis", "127.0.0.1:1", "-duration", "10ms", "-json"}, &out, &errs)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr: %s", code, errs.String())
	}
	if !strings.Contains(errs.String(), "measurements failed") || strings.Contains(errs.String(), "redis: ") && strings.Count(errs.String(), "connection refused") > 40 {
		t.Fatalf("stderr: %s", errs.String())
	}
	var plan Plan
	if err := json.Unmarshal(out.Bytes(), &plan); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, r := range plan.Measurements {
		if r.Err != "" {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no measurement failed on an unreachable Redis")
	}
}

// An interrupted run exits 1 with no plan.
func TestInterruptedRunFails(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errs bytes.Buffer
	if code := run(ctx, []string{"-duration", "10ms"}, &out, &errs); code != 1 || out.Len() != 0 || !strings.Contains(errs.String(), "interrupted") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errs.String())
	}
}

// Measurements made on embedded stand-ins size nothing unless allowed.
func TestEmbeddedFallbackNotSized(t *testing.T) {
	results := []Result{{Name: "rank.add", Tier: TierRedis, PerSec: 1e5, Fallback: true}}
	s := []Scenario{{Name: "x", Sizings: []Sizing{{What: "w", Peak: 2e5, Measurement: "rank.add"}}, Replication: defaultReplication}}
	if m := makePlan(s, results, 1, false).Scenarios[0].Sizings[0]; m.Size != nil || !strings.Contains(m.Note, "embedded") {
		t.Fatalf("fallback sized: %+v", m)
	}
	if m := makePlan(s, results, 1, true).Scenarios[0].Sizings[0]; m.Size == nil || m.Size.Machines != 4 {
		t.Fatalf("-allow-embedded: %+v", m)
	}
}

// The text report shows each sizing's arithmetic and each measurement's
// latency.
func TestSizingArithmetic(t *testing.T) {
	results := []Result{
		{Name: "order.create", Tier: TierMySQL, PerSec: 1320, Workers: 8, Batch: 32, Latency: &Latency{P50: 0.042, P99: 12.34, P999: 1500, Max: 2.5e6}},
		{Name: "idgen.snowflake", Tier: TierApp, PerSec: 4e6},
	}
	s := []Scenario{{Name: "sale", Replication: Replication{Redis: 1, MySQL: 2},
		Sizings: []Sizing{
			{What: "orders", Peak: 6944.44, Measurement: "order.create"},
			{What: "ids", Peak: 6944.44, Measurement: "idgen.snowflake"},
		},
		Storage: []Storage{{What: "orders", PerDay: 1e6, RetentionDays: 365, BytesPerRecord: 1000, On: TierMySQL}},
	}}
	var out bytes.Buffer
	if err := makePlan(s, results, 0.6, false).WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"6,944/s ÷ (1,320/s × 60%) = 8.8 → 9 MySQL primaries + 18 replicas = 27 machines",
		"6,944/s ÷ (4,000,000/s × 60%) = 0.0029 → 1 app node",
		"1.00M/day × 365 d × 1,000 B = 365 GB × 3 copies = 1.09 TB of MySQL disk",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	latency := regexp.MustCompile(`order\.create .* 8 +42\.0ns +12\.3µs +1\.50ms +2\.50s \(an op is a batch of 32\)`)
	if !latency.MatchString(out.String()) {
		t.Errorf("report lacks order.create's workers and latency:\n%s", out.String())
	}
}

// Storage takes its bytes per record from the measurement's footprint when
// it has a usable one, and says so; otherwise the stated figure, and why.
func TestStorageFromFootprint(t *testing.T) {
	fp := &Footprint{Records: 2000, Bytes: 300000, How: "MEMORY USAGE"}
	st := []Storage{{What: "bitmaps", Records: 1e6, BytesPerRecord: 46, On: TierRedis, MeasuredBy: "signin.sign"}}
	for _, c := range []struct {
		name     string
		result   Result
		embedded bool
		perRec   float64
		note     string
	}{
		{"measured", Result{Name: "signin.sign", Footprint: fp}, false, 150, "measured by signin.sign: 300,000 B over 2,000 records (MEMORY USAGE); stated 46.0 B"},
		{"embedded refused", Result{Name: "signin.sign", Footprint: fp, Fallback: true}, false, 46, "ran on an embedded stand-in"},
		{"embedded allowed", Result{Name: "signin.sign", Footprint: fp, Fallback: true}, true, 150, "measured by signin.sign"},
		{"sampling failed", Result{Name: "signin.sign", FootprintErr: "no records stored"}, false, 46, "as stated: no records stored"},
	} {
		p := makePlan([]Scenario{{Name: "s", Replication: Replication{Redis: 1}, Storage: st}}, []Result{c.result}, 0.6, c.embedded)
		got := p.Scenarios[0].Storage[0]
		if got.BytesPerRecord != c.perRec || got.Bytes != 1e6*c.perRec || got.TotalBytes != 2e6*c.perRec || !strings.Contains(got.Note, c.note) {
			t.Errorf("%s: %g B/record, %g B, %g B in all, note %q; want %g B/record, note with %q", c.name,
				got.BytesPerRecord, got.Bytes, got.TotalBytes, got.Note, c.perRec, c.note)
		}
		if (got.Measured != nil) != (c.perRec == 150) || got.Measured != nil && got.StatedBytesPerRecord != 46 {
			t.Errorf("%s: measured %+v, stated %g", c.name, got.Measured, got.StatedBytesPerRecord)
		}
	}
}

// The JSON plan's schema: what a program reading `-json` may rely on.
func TestJSONSchema(t *testing.T) {
	// Embedded backends, whatever the environment names: a server the user
	// names keeps its address in the report, a spawned one must not.
	t.Setenv("CASEBOOK_REDIS_ADDR", "")
	t.Setenv("CASEBOOK_MYSQL_DSN", "")
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"-json", "-duration", "10ms", "-allow-embedded"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, errs.String())
	}
	var plan map[string]any
	if err := json.Unmarshal(out.Bytes(), &plan); err != nil {
		t.Fatal(err)
	}
	has := func(where string, obj any, keys ...string) map[string]any {
		t.Helper()
		m, ok := obj.(map[string]any)
		if !ok {
			t.Fatalf("%s: %T, want an object", where, obj)
		}
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("%s lacks %q: %v", where, k, m)
			}
		}
		return m
	}
	list := func(where string, v any) []any {
		t.Helper()
		l, ok := v.([]any)
		if !ok || len(l) == 0 {
			t.Fatalf("%s: %v, want a non-empty list", where, v)
		}
		return l
	}
	has("plan", plan, "model", "utilisation", "measurements", "scenarios")
	for _, m := range list("measurements", plan["measurements"]) {
		r := has("measurement", m, "name", "unit", "tier", "backend", "per_sec", "workers", "latency_us")
		l := has("latency_us", r["latency_us"], "p50", "p99", "p999", "max")
		if !(l["p50"].(float64) > 0 && l["p50"].(float64) <= l["p99"].(float64) &&
			l["p99"].(float64) <= l["p999"].(float64) && l["p999"].(float64) <= l["max"].(float64)) {
			t.Errorf("%v: latency_us %v is not 0 < p50 ≤ p99 ≤ p999 ≤ max", r["name"], l)
		}
		if b, _ := r["backend"].(string); strings.ContainsAny(b, "0123456789:") && !strings.Contains(b, "×") {
			t.Errorf("%v: backend %q names a throw-away address", r["name"], b)
		}
	}
	sized := 0
	for _, s := range list("scenarios", plan["scenarios"]) {
		sc := has("scenario", s, "name", "inputs", "replication", "figures", "sizings")
		if _, dup := sc["machines"]; dup {
			t.Errorf("%v: a machines list beside sizings", sc["name"])
		}
		has("replication", sc["replication"], "redis", "mysql")
		for _, f := range list("figures", sc["figures"]) {
			fig := has("figure", f, "name", "unit", "value", "agrees")
			if _, hasSeed := fig["seed"]; hasSeed {
				has("figure with a seed", f, "ratio")
			}
		}
		for _, z := range list("sizings", sc["sizings"]) {
			sz := has("sizing", z, "what", "peak", "measurement")
			if _, ok := sz["size"]; !ok {
				has("unsized sizing", z, "note")
				continue
			}
			sized++
			has("sizing", z, "tier", "measured_per_sec", "arithmetic")
			has("size", sz["size"], "exact", "primaries", "replicas", "machines")
		}
		if st, ok := sc["storage"]; ok {
			for _, x := range list("storage", st) {
				has("storage", x, "what", "bytes_per_record", "on", "bytes", "total_bytes", "arithmetic")
			}
		}
	}
	if sized == 0 {
		t.Error("nothing sized")
	}
}
