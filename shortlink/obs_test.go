package shortlink_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

// A scripted run read through the OpenTelemetry SDK — shortens (good, bad,
// blocked, a taken alias, over the create limit), resolves answered by each
// cache layer, found, unknown, expired, used up, over the miss limit,
// canceled, failed and after Close, stats, deletes, updates (made, bad,
// blocked, a conflict, unknown), histories and the handler's routes
// — with every operation count, duration count, cache lookup and span
// exact.
func TestMetricsAndSpans(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewInMemoryExporter()
	clk := newClock()
	cfg := shortlink.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)),
		Now:            clk.Now, Blocklist: []string{"blocked.example"}, TablesPerDB: 16,
		CreateLimit: redis_rate.PerHour(1), MissLimit: redis_rate.PerHour(1),
	}
	r, proxy := testenv.NewFaultyRedis(t)
	db := testenv.NewSQL(t)
	a := newServiceOn(t, r, db, cfg)
	b := newServiceOn(t, r, db, cfg) // a second process: its own local cache, the same Redis and SQL

	want := map[string]float64{}
	// done counts one operation: outcome "ok", "canceled", "error", or a
	// refusal's reason; got is the error it ended with, wantErr the one
	// the script expects.
	done := func(op string, got, wantErr error, outcome string) {
		t.Helper()
		if !errors.Is(got, wantErr) {
			t.Fatalf("%s: %v, want %v", op, got, wantErr)
		}
		switch outcome {
		case "ok", "canceled", "error":
			obstest.AddOp(want, "shortlink", op, outcome, "", 1)
		default:
			obstest.AddOp(want, "shortlink", op, "refused", outcome, 1)
		}
	}
	// looked counts the cache layers' answers to one lookup by s, "layer
	// result"; expected is want with the lookups of services, every answer
	// a layer can give reported, zeros included.
	lookups := map[*shortlink.Service]map[string]float64{}
	looked := func(s *shortlink.Service, answers ...string) {
		if lookups[s] == nil {
			lookups[s] = map[string]float64{}
		}
		for _, ans := range answers {
			lookups[s][ans]++
		}
	}
	expected := func(services ...*shortlink.Service) map[string]float64 {
		all := maps.Clone(want)
		for _, ans := range []string{"local hit", "local negative", "local miss", "redis hit", "redis negative", "redis miss", "redis error", "sql hit", "sql miss", "sql error"} {
			layer, result, _ := strings.Cut(ans, " ")
			k := "casebook.shortlink.cache.lookups casebook.cache.layer=" + layer + ",casebook.cache.result=" + result
			all[k] = 0
			for _, s := range services {
				all[k] += lookups[s][ans]
			}
		}
		return all
	}
	shorten := func(s *shortlink.Service, url string, o shortlink.Options, wantErr error, outcome string) string {
		t.Helper()
		l, err := s.Shorten(ctx, url, o)
		done("shorten", err, wantErr, outcome)
		if l == nil {
			return ""
		}
		return l.Code
	}
	resolve := func(s *shortlink.Service, ctx context.Context, code string, o shortlink.ResolveOptions, wantErr error, outcome string) {
		t.Helper()
		_, err := s.ResolveWith(ctx, code, o)
		done("resolve", err, wantErr, outcome)
	}
	none := shortlink.ResolveOptions{}

	var codes []string
	for i := range 5 {
		codes = append(codes, shorten(a, fmt.Sprintf("https://example.com/%d", i), shortlink.Options{}, nil, "ok"))
	}
	shorten(a, "ftp://example.com/", shortlink.Options{}, shortlink.ErrInvalidURL, "invalid")
	shorten(a, "https://www.blocked.example/", shortlink.Options{}, shortlink.ErrBlocked, "blocked")
	shorten(a, "https://example.com/mine", shortlink.Options{Alias: "mine"}, nil, "ok")
	shorten(a, "https://example.com/mine2", shortlink.Options{Alias: "mine"}, shortlink.ErrAliasTaken, "alias_taken")
	shorten(a, "https://example.com/ip", shortlink.Options{ClientIP: "192.0.2.1"}, nil, "ok")
	shorten(a, "https://example.com/ip2", shortlink.Options{ClientIP: "192.0.2.1"}, shortlink.ErrRateLimited, "rate_limited")

	resolve(a, ctx, codes[0], none, nil, "ok")
	looked(a, "local miss", "redis miss", "sql hit")
	a.WaitLocal()
	resolve(a, ctx, codes[0], none, nil, "ok")
	looked(a, "local hit")
	resolve(a, ctx, "nosuchcode", none, shortlink.ErrNotFound, "not_found")
	looked(a, "local miss", "redis miss", "sql miss")
	a.WaitLocal()
	resolve(a, ctx, "nosuchcode", none, shortlink.ErrNotFound, "not_found")
	looked(a, "local negative")
	resolve(a, ctx, "no/such", none, shortlink.ErrNotFound, "not_found") // not a code: not looked up
	resolve(b, ctx, codes[0], none, nil, "ok")
	looked(b, "local miss", "redis hit")
	resolve(b, ctx, "nosuchcode", none, shortlink.ErrNotFound, "not_found")
	looked(b, "local miss", "redis negative")

	once := shorten(a, "https://example.com/once", shortlink.Options{MaxVisits: 1}, nil, "ok")
	resolve(a, ctx, once, none, nil, "ok")
	looked(a, "local miss", "redis miss", "sql hit")
	a.WaitLocal()
	resolve(a, ctx, once, none, shortlink.ErrMaxVisits, "max_visits")
	looked(a, "local hit")
	soon := shorten(a, "https://example.com/soon", shortlink.Options{TTL: time.Minute}, nil, "ok")
	clk.Add(2 * time.Minute)
	resolve(a, ctx, soon, none, shortlink.ErrExpired, "expired")
	looked(a, "local miss", "redis miss", "sql hit")
	walker := shortlink.ResolveOptions{ClientIP: "192.0.2.2"}
	resolve(a, ctx, "nosuchcode2", walker, shortlink.ErrNotFound, "not_found") // spends its one miss
	looked(a, "local miss", "redis miss", "sql miss")
	resolve(a, ctx, codes[0], walker, shortlink.ErrRateLimited, "rate_limited") // refused before the lookup

	// The handler: each request one operation.
	base := server(t, a)
	send := func(method, path, ip, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("X-Test-IP", ip)
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	route := func(op, method, path, ip, body string, status int, outcome string) {
		t.Helper()
		if got := send(method, path, ip, body); got != status {
			t.Fatalf("%s %s: %d, want %d", method, path, got, status)
		}
		done(op, nil, nil, outcome)
	}
	route("redirect", "GET", "/"+codes[0], "198.51.100.1", "", 302, "ok")
	looked(a, "local hit")
	route("redirect", "HEAD", "/"+codes[0], "198.51.100.1", "", 302, "ok")
	looked(a, "local hit")
	route("redirect", "GET", "/nosuchcode", "198.51.100.1", "", 404, "not_found") // spends its one miss
	looked(a, "local negative")
	route("stats", "GET", "/api/links/"+codes[0], "198.51.100.1", "", 429, "rate_limited")
	route("stats", "GET", "/api/links/"+codes[0], "198.51.100.2", "", 200, "ok")
	route("delete", "DELETE", "/api/links/"+codes[4], "198.51.100.2", "", 204, "ok")
	route("shorten", "POST", "/api/links", "198.51.100.3", "not json", 400, "invalid")
	route("shorten", "POST", "/api/links", "198.51.100.3", `{"url":"https://example.com/api"}`, 201, "ok")

	_, err := a.Stats(ctx, codes[1])
	done("stats", err, nil, "ok")
	_, err = a.Stats(ctx, "nosuchcode")
	done("stats", err, shortlink.ErrNotFound, "not_found")
	done("delete", a.Delete(ctx, codes[3]), nil, "ok")
	done("delete", a.Delete(ctx, codes[3]), shortlink.ErrNotFound, "not_found")
	edited := shorten(a, "https://example.com/edit", shortlink.Options{}, nil, "ok")
	update := func(code string, u shortlink.Update, wantErr error, outcome string) {
		t.Helper()
		_, err := a.Update(ctx, code, u)
		done("update", err, wantErr, outcome)
	}
	update(edited, shortlink.Update{URL: new("https://example.com/edited")}, nil, "ok")
	update(edited, shortlink.Update{URL: new("ftp://example.com/")}, shortlink.ErrInvalidURL, "invalid")
	update(edited, shortlink.Update{URL: new("https://www.blocked.example/")}, shortlink.ErrBlocked, "blocked")
	update(edited, shortlink.Update{URL: new("https://example.com/late"), IfVersion: 1}, shortlink.ErrConflict, "conflict")
	update("nosuchcode", shortlink.Update{URL: new("https://example.com/x")}, shortlink.ErrNotFound, "not_found")
	_, err = a.History(ctx, edited, shortlink.HistoryOptions{})
	done("history", err, nil, "ok")
	_, err = a.History(ctx, "nosuchcode", shortlink.HistoryOptions{})
	done("history", err, shortlink.ErrNotFound, "not_found")
	_, err = a.History(ctx, edited, shortlink.HistoryOptions{Limit: -1})
	done("history", err, shortlink.ErrInvalidOptions, "invalid")
	route("update", "PATCH", "/api/links/"+edited, "198.51.100.2", `{"redirect":301}`, 200, "ok")
	route("update", "PATCH", "/api/links/"+edited, "198.51.100.2", `{"Redirect":301}`, 400, "invalid")
	route("update", "PATCH", "/api/links/"+edited, "198.51.100.2", `{"redirect":302,"if_version":1}`, 409, "conflict")
	route("history", "GET", "/api/links/"+edited+"/history", "198.51.100.2", "", 200, "ok")
	route("history", "GET", "/api/links/"+edited+"/history?limit=0", "198.51.100.2", "", 400, "invalid")
	_, err = a.QRCode(ctx, codes[1], shortlink.QRPNG, 10, shortlink.ResolveOptions{}) // refused before any lookup
	done("qr", err, shortlink.ErrInvalidOptions, "invalid")

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	resolve(a, canceled, codes[1], none, context.Canceled, "canceled")
	looked(a, "local miss", "redis error")
	proxy.Reset() // Redis unreachable: a lookup past the local cache fails
	if _, err = a.Resolve(ctx, codes[2]); err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("resolve with Redis unreachable: %v, want an error", err)
	}
	done("resolve", err, err, "error")
	looked(a, "local miss", "redis error")
	proxy.Heal()
	obstest.Expect(t, obstest.Points(t, reader), expected(a, b))

	// A closed Service refuses, and its lookups are no longer reported.
	b.Shutdown(ctx)
	resolve(b, ctx, codes[0], none, shortlink.ErrClosed, "closed")
	shorten(b, "https://example.com/late", shortlink.Options{}, shortlink.ErrClosed, "closed")

	obstest.Expect(t, obstest.Points(t, reader), expected(a))
	checkInstruments(t, reader)
	checkSpans(t, spans.GetSpans(), want)
}

// checkInstruments checks the kind and unit of each instrument.
func checkInstruments(t *testing.T, reader *sdkmetric.ManualReader) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			kind := fmt.Sprintf("%T", m.Data)
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && !s.IsMonotonic {
				kind += " (not monotonic)"
			}
			seen[m.Name] = kind + " " + m.Unit
		}
	}
	wantKinds := map[string]string{
		"casebook.shortlink.operations":         "metricdata.Sum[int64] {operation}",
		"casebook.shortlink.operation.duration": "metricdata.Histogram[float64] s",
		"casebook.shortlink.cache.lookups":      "metricdata.Sum[int64] {lookup}", // monotonic, observed
	}
	for name, kind := range wantKinds {
		if seen[name] != kind {
			t.Errorf("%s: %q, want %q", name, seen[name], kind)
		}
	}
	if len(seen) != len(wantKinds) {
		t.Errorf("instruments %v, want %v", seen, wantKinds)
	}
}

// checkSpans checks that every operation counted in want was one span
// "shortlink.<operation>" carrying its outcome and reason, and that only
// the failed ones recorded an error.
func checkSpans(t *testing.T, spans tracetest.SpanStubs, want map[string]float64) {
	t.Helper()
	wantSpans := map[string]float64{}
	for k, n := range want {
		attrs, ok := strings.CutPrefix(k, "casebook.shortlink.operations ")
		if !ok {
			continue
		}
		var op, rest string
		for i, kv := range strings.Split(attrs, ",") {
			_, v, _ := strings.Cut(kv, "=")
			if i == 0 {
				op = v
			} else {
				rest += "/" + v
			}
		}
		wantSpans["shortlink."+op+rest] += n
	}
	got := map[string]float64{}
	for _, s := range spans {
		attrs := attribute.NewSet(s.Attributes...)
		outcome, _ := attrs.Value("casebook.outcome")
		k := s.Name + "/" + outcome.AsString()
		if reason, ok := attrs.Value("casebook.reason"); ok {
			k += "/" + reason.AsString()
		}
		got[k]++
		failed := outcome.AsString() == "error"
		if (len(s.Events) != 0) != failed || (s.Status.Code == codes.Error) != failed {
			t.Errorf("span %s: %d events, status %v", k, len(s.Events), s.Status)
		}
		if attrs.Len() != len(s.Attributes) || s.SpanKind.String() != "internal" {
			t.Errorf("span %s: attributes %v, kind %v", k, s.Attributes, s.SpanKind)
		}
	}
	obstest.Expect(t, got, wantSpans)
}
