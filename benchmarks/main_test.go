package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// Bad arguments exit 2 and say why, before any backend is opened.
func TestBadArguments(t *testing.T) {
	t.Setenv("CASEBOOK_MYSQL_DSN", "") // -write-reference without -mysql
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"date": "2026-12-01", "unknown": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-duration", "0"}, {"-duration", "-1s"}, {"-duration", "11m"}, {"-duration", "soon"},
		{"extra"}, {"-json", "plan.json"}, {"-nope"},
		{"-utilisation", "0"}, {"-utilisation", "1.5"}, {"-utilisation", "NaN"},
		{"-html", "/nonexistent-dir/r.html"}, {"-html", t.TempDir()},
		{"-soak", "10s"}, // moved to go run ./benchmarks/soak
		{"-write-reference", "ref.json"}, {"-write-reference", "ref.json", "-mysql", "x@tcp(h)/", "-only", "rank.add"},
		{"-reference", "/nonexistent/ref.json"}, {"-reference", bad}, {"-allow-embedded", "-reference", bad},
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
// once (on its progress line and in the closing list, plus the first
// line), no go-redis pool noise, the plan still printed with notes.
func TestUnreachableBackendFails(t *testing.T) {
	var out, errs bytes.Buffer
	code := run(context.Background(), []string{"-redis", "127.0.0.1:1", "-duration", "10ms", "-json"}, &out, &errs)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr: %s", code, errs.String())
	}
	if !strings.Contains(errs.String(), "measurements failed") || strings.Contains(errs.String(), "redis: ") && strings.Count(errs.String(), "connection refused") > 2*len(measurements())+1 {
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

// testReference is a profile as -write-reference writes one.
func testReference(ms ...Result) *Reference {
	ref := &Reference{Date: "2026-12-01", Machine: Machine{Cores: 2, CPU: "test CPU"}, Source: "test.json", Measurements: ms}
	ref.Versions.Redis, ref.Versions.MySQL = "7.0.15", "10.11.19-MariaDB-0+deb12u1"
	return ref
}

// A measurement made on an embedded stand-in sizes from the reference
// profile's figure, labelled, with its own beside it; -allow-embedded
// (no profile) sizes from the stand-in's figure, saying so.
func TestEmbeddedSizedFromReference(t *testing.T) {
	results := []Result{{Name: "rank.add", Tier: TierRedis, PerSec: 1e5, Backend: "miniredis", Fallback: true}}
	s := []Scenario{{Name: "x", Sizings: []Sizing{{What: "w", Peak: 2e5, Measurement: "rank.add"}}, Replication: defaultReplication}}
	ref := testReference(Result{Name: "rank.add", Tier: TierRedis, PerSec: 3e4, ServerPerSec: 5e4})
	plan := makePlan(s, results, 1, ref)
	m := plan.Scenarios[0].Sizings[0]
	if m.Size == nil || m.Size.Primaries != 4 || m.Basis != BasisReference || m.PerNode != 5e4 || m.LivePerSec != 1e5 {
		t.Fatalf("sized from the reference: %+v", m)
	}
	for _, want := range []string{"(50,000/s per core of server CPU × 100%)", "(reference: Redis 7.0.15 on 2 cores, 2026-12-01; live on miniredis: 100k/s, not the basis)"} {
		if !strings.Contains(m.Arithmetic, want) {
			t.Errorf("arithmetic %q lacks %q", m.Arithmetic, want)
		}
	}
	if plan.Reference == nil || plan.Reference.Date != "2026-12-01" || len(plan.Reference.Missing) != 0 {
		t.Errorf("plan's reference: %+v", plan.Reference)
	}
	var page bytes.Buffer
	if err := plan.WriteHTML(&page, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<p class="model" id="reference">Reference profile: loads measured here on embedded stand-ins are sized from test.json`,
		`<td class="basis">reference: Redis 7.0.15 on 2 cores, 2026-12-01</td>`} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("HTML report lacks %q", want)
		}
	}
	if m := makePlan(s, results, 1, nil).Scenarios[0].Sizings[0]; m.Size == nil || m.Size.Primaries != 2 || m.Basis != BasisMeasured ||
		!strings.Contains(m.Arithmetic, "embedded stand-in miniredis, by -allow-embedded") {
		t.Fatalf("-allow-embedded: %+v", m)
	}
	results[0].Fallback = false
	if m := makePlan(s, results, 1, ref).Scenarios[0].Sizings[0]; m.Size == nil || m.Size.Primaries != 2 || m.Basis != BasisMeasured || m.Reference != "" {
		t.Fatalf("real server: %+v", m)
	}
}

// A profile lacking a measurement leaves its loads unsized on a stand-in,
// saying which profile lacks what, rather than sizing them from nothing.
func TestReferenceMissingMeasurement(t *testing.T) {
	results := []Result{
		{Name: "rank.add", Tier: TierRedis, PerSec: 1e5, Backend: "miniredis", Fallback: true},
		{Name: "order.create", Tier: TierMySQL, PerSec: 100, Backend: "sqlite", Fallback: true},
	}
	s := []Scenario{{Name: "x", Replication: defaultReplication, Sizings: []Sizing{
		{What: "w", Peak: 2e5, Measurement: "rank.add"}, {What: "o", Peak: 500, Measurement: "order.create"}}}}
	plan := makePlan(s, results, 1, testReference(Result{Name: "order.create", Tier: TierMySQL, PerSec: 1000}))
	rank, order := plan.Scenarios[0].Sizings[0], plan.Scenarios[0].Sizings[1]
	if rank.Size != nil || rank.PerNode != 0 || !strings.Contains(rank.Note, "not sized: rank.add ran on an embedded stand-in (miniredis), and the reference profile test.json has no rank.add") {
		t.Errorf("missing from the profile: %+v", rank)
	}
	if order.Size == nil || order.Size.Primaries != 1 || !strings.Contains(order.Arithmetic, "reference: MariaDB 10.11.19 on 2 cores, 2026-12-01") {
		t.Errorf("in the profile: %+v", order)
	}
	if got := plan.Reference.Missing; !slices.Equal(got, []string{"rank.add"}) {
		t.Errorf("plan says the profile misses %v", got)
	}
	var out bytes.Buffer
	if err := plan.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "it has no rank.add (their loads are not sized)") {
		t.Errorf("report's head does not say what the profile lacks:\n%s", out.String())
	}
}

// The same through the command: a -reference file without a measurement
// is said on stderr and in the sizing, on miniredis and SQLite.
func TestReferenceFileMissingMeasurement(t *testing.T) {
	embeddedOnly(t)
	ref, err := loadReference("")
	if err != nil {
		t.Fatal(err)
	}
	ref.Measurements = slices.DeleteFunc(ref.Measurements, func(r Result) bool { return r.Name == "rank.add" })
	path := filepath.Join(t.TempDir(), "partial.json")
	b, _ := json.Marshal(ref)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"-reference", path, "-only", "rank.add", "-duration", "10ms", "-json"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, errs.String())
	}
	if !strings.Contains(errs.String(), "the reference profile "+path+" has no rank.add") {
		t.Errorf("stderr does not say what the profile lacks: %s", errs.String())
	}
	var plan Plan
	if err := json.Unmarshal(out.Bytes(), &plan); err != nil {
		t.Fatal(err)
	}
	for _, s := range plan.Scenarios {
		for _, z := range s.Sizings {
			if z.Size != nil || !strings.Contains(z.Note, "has no rank.add") {
				t.Errorf("%s / %s: %+v", s.Name, z.What, z)
			}
		}
	}
}

// embeddedOnly makes the run's backends miniredis and SQLite: no server
// named, no redis-server on PATH.
func embeddedOnly(t *testing.T) {
	t.Helper()
	t.Setenv("CASEBOOK_REDIS_ADDR", "")
	t.Setenv("CASEBOOK_MYSQL_DSN", "")
	t.Setenv("PATH", t.TempDir())
}

// A run on miniredis and SQLite sizes every load, each from the reference
// profile (labelled) or from a measurement that needs no server; storage
// lines carry no error text; the first line names the backends opened.
func TestEmbeddedRunSizesEveryLoad(t *testing.T) {
	embeddedOnly(t)
	checkEmbeddedRun(t, "SQL: SQLite file ")
}

// The default binary links no SQLite (sql.go): with no MySQL named, the
// measurements that need SQL do not run, say so, and their loads are
// sized from the reference profile like the rest; the run still succeeds.
func TestRunWithoutSQLSizesEveryLoad(t *testing.T) {
	embeddedOnly(t)
	withoutSQLite(t)
	plan := checkEmbeddedRun(t, "SQL: none (name one with -mysql or CASEBOOK_MYSQL_DSN, or build with -tags casebook_sqlite")
	notRun := 0
	for _, r := range plan.Measurements {
		if r.NotRun != "" {
			notRun++
			if r.NotRun != noSQL || !r.Fallback || r.PerSec != 0 || r.Err != "" {
				t.Errorf("%s: %+v", r.Name, r)
			}
		}
	}
	// order, seckill, shortlink, redpacket and feed keep data in SQL.
	if notRun < 10 {
		t.Errorf("%d measurements did not run for want of SQL, want the 10 or more that need it", notRun)
	}
	for _, s := range plan.Scenarios {
		for _, z := range s.Sizings {
			if z.Measurement == "order.create" && !strings.Contains(z.Arithmetic, "not measured here: "+noSQL) {
				t.Errorf("%s / %s: %q", s.Name, z.What, z.Arithmetic)
			}
		}
	}
}

func checkEmbeddedRun(t *testing.T, sqlNamed string) Plan {
	t.Helper()
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"-json", "-duration", "10ms"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, errs.String())
	}
	first, _, _ := strings.Cut(errs.String(), "\n")
	if !strings.Contains(first, "Redis: in-process miniredis on 127.0.0.1:") || !strings.Contains(first, sqlNamed) {
		t.Errorf("first line does not name the backends opened (want %q): %q", sqlNamed, first)
	}
	var plan Plan
	if err := json.Unmarshal(out.Bytes(), &plan); err != nil {
		t.Fatal(err)
	}
	if plan.Reference == nil || len(plan.Reference.Missing) > 0 {
		t.Fatalf("plan's reference: %+v", plan.Reference)
	}
	byName := map[string]Result{}
	for _, r := range plan.Measurements {
		byName[r.Name] = r
	}
	sized := 0
	for _, s := range plan.Scenarios {
		for _, z := range s.Sizings {
			r := byName[z.Measurement]
			switch {
			case z.Size == nil:
				t.Errorf("%s / %s not sized: %s", s.Name, z.What, z.Note)
			case r.Fallback && r.NotRun == "" && (z.Basis != BasisReference || !strings.Contains(z.Arithmetic, "(reference: ") || !(z.LivePerSec > 0)):
				t.Errorf("%s / %s, measured on %s: basis %q, arithmetic %q, live %g", s.Name, z.What, r.Backend, z.Basis, z.Arithmetic, z.LivePerSec)
			case r.NotRun != "" && (z.Basis != BasisReference || !strings.Contains(z.Arithmetic, "(reference: ") || z.LivePerSec != 0):
				t.Errorf("%s / %s, not run: basis %q, arithmetic %q, live %g", s.Name, z.What, z.Basis, z.Arithmetic, z.LivePerSec)
			case !r.Fallback && z.Basis != BasisMeasured:
				t.Errorf("%s / %s, measured on %s: basis %q", s.Name, z.What, r.Backend, z.Basis)
			}
			if r.Fallback {
				sized++
			}
		}
		for _, st := range s.Storage {
			if strings.Contains(st.Note, "ERR") || st.MeasuredBy != "" && st.Basis != BasisReference {
				t.Errorf("%s / %s: basis %q, note %q", s.Name, st.What, st.Basis, st.Note)
			}
		}
	}
	if sized < 13 {
		t.Errorf("%d loads on stand-ins sized from the reference, want every one of them (13 or more)", sized)
	}
	return plan
}

// The shipped profile parses, holds every measurement the harness knows,
// each made on a real server, and says what made it.
func TestShippedReference(t *testing.T) {
	ref, err := loadReference("")
	if err != nil {
		t.Fatal(err)
	}
	if missing := ref.missing(measurements()); len(missing) > 0 {
		t.Errorf("benchmarks/reference.json lacks %v: regenerate it with %s", missing, ref.Command)
	}
	if !strings.Contains(ref.Command, "-write-reference") || ref.Machine.CPU == "" || ref.Versions.Go == "" {
		t.Errorf("profile does not say how and where it was made: %+v", ref)
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
	if err := makePlan(s, results, 0.6, nil).WriteText(&out); err != nil {
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
	latency := regexp.MustCompile(`\norder\.create +1\.32k +- +8 +32 +42\.0ns +12\.3µs +1\.50ms +2\.50s\n`)
	if !latency.MatchString(out.String()) {
		t.Errorf("report lacks order.create's workers, batch and latency:\n%s", out.String())
	}
	// The summary opens the report: 9 MySQL primaries (8.8 exact) with two
	// replicas each, one app node for both loads' app share.
	summary := regexp.MustCompile(`^CAPACITY PLAN at 60% utilisation .*\nscenario +Redis +MySQL +app +machines +binding load +headroom\n` +
		`sale +- +9 \+ 18 +1 +28 +orders \(order\.create\) +3%\nall scenarios +28 *\n`)
	if !summary.MatchString(out.String()) {
		t.Errorf("report does not open with the summary:\n%s", out.String())
	}
	for i, line := range strings.Split(out.String(), "\n") {
		if n := utf8.RuneCountInString(line); n > textWidth {
			t.Errorf("line %d is %d columns: %q", i+1, n, line)
		}
	}
}

// Storage takes its bytes per record from this run's footprint on a real
// server, else the reference profile's (labelled), else the stated figure,
// and says which and why in words.
func TestStorageFromFootprint(t *testing.T) {
	fp := &Footprint{Records: 2000, Bytes: 300000, How: "MEMORY USAGE"}
	ref := testReference(Result{Name: "signin.sign", Tier: TierRedis, PerSec: 1, Footprint: &Footprint{Records: 1000, Bytes: 50000, How: "MEMORY USAGE"}})
	empty := testReference()
	st := []Storage{{What: "bitmaps", Records: 1e6, BytesPerRecord: 46, On: TierRedis, MeasuredBy: "signin.sign"}}
	noMemory := Result{Name: "signin.sign", Backend: "miniredis", Fallback: true, FootprintErr: errNoMemoryUsage.Error()}
	for _, c := range []struct {
		name   string
		result Result
		ref    *Reference
		perRec float64
		basis  string
		note   string
	}{
		{"measured", Result{Name: "signin.sign", Footprint: fp}, ref, 150, BasisMeasured, "measured by signin.sign: 300,000 B over 2,000 records (MEMORY USAGE); stated 46.0 B"},
		{"embedded, from the reference", Result{Name: "signin.sign", Backend: "spawned", Footprint: fp, Fallback: true}, ref, 50, BasisReference,
			"measured by signin.sign: 50,000 B over 1,000 records (MEMORY USAGE), reference: Redis 7.0.15 on 2 cores, 2026-12-01; stated 46.0 B — this run's: signin.sign ran on an embedded stand-in (spawned)"},
		{"embedded, -allow-embedded", Result{Name: "signin.sign", Backend: "spawned", Footprint: fp, Fallback: true}, nil, 150, BasisMeasured, "on the embedded stand-in spawned, by -allow-embedded"},
		{"embedded, not in the reference", Result{Name: "signin.sign", Backend: "spawned", Footprint: fp, Fallback: true}, empty, 46, BasisStated,
			"bytes per record as stated: signin.sign ran on an embedded stand-in (spawned), and the reference profile has no footprint of signin.sign"},
		{"miniredis, from the reference", noMemory, ref, 50, BasisReference, "this run's: miniredis cannot say how much memory a key takes (it has no MEMORY USAGE)"},
		{"miniredis, -allow-embedded", noMemory, nil, 46, BasisStated, "as stated: miniredis cannot say how much memory a key takes"},
		{"sampling failed", Result{Name: "signin.sign", FootprintErr: "no records stored"}, nil, 46, BasisStated, "as stated: no records stored"},
	} {
		p := makePlan([]Scenario{{Name: "s", Replication: Replication{Redis: 1}, Storage: st}}, []Result{c.result}, 0.6, c.ref)
		got := p.Scenarios[0].Storage[0]
		if got.BytesPerRecord != c.perRec || got.Bytes != 1e6*c.perRec || got.TotalBytes != 2e6*c.perRec || got.Basis != c.basis || !strings.Contains(got.Note, c.note) {
			t.Errorf("%s: %g B/record, %g B, %g B in all, basis %q, note %q; want %g B/record, basis %q, note with %q", c.name,
				got.BytesPerRecord, got.Bytes, got.TotalBytes, got.Basis, got.Note, c.perRec, c.basis, c.note)
		}
		if (got.Measured != nil) != (c.basis != BasisStated) || got.Measured != nil && got.StatedBytesPerRecord != 46 {
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
	if code := run(context.Background(), []string{"-json", "-duration", "10ms"}, &out, &errs); code != 0 {
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
	has("plan", plan, "model", "utilisation", "measurements", "scenarios", "reference") // SQLite's measurements size from it
	has("reference", plan["reference"], "source", "command", "date", "machine", "go", "redis", "mysql", "duration")
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
			has("sizing", z, "tier", "basis", "measured_per_sec", "arithmetic")
			if sz["basis"] == BasisReference {
				has("sizing from the reference", z, "reference", "live_per_sec")
			}
			has("size", sz["size"], "exact", "primaries", "replicas", "machines")
		}
		if st, ok := sc["storage"]; ok {
			for _, x := range list("storage", st) {
				has("storage", x, "what", "bytes_per_record", "basis", "on", "bytes", "total_bytes", "arithmetic")
			}
		}
	}
	if sized == 0 {
		t.Error("nothing sized")
	}
}
