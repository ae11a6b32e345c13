package shortlink_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

func seeded(b *testing.B, s *shortlink.Service, n int) []string {
	b.Helper()
	codes := make([]string, n)
	for i := range codes {
		l, err := s.Shorten(context.Background(), fmt.Sprintf("https://example.com/%d", i), shortlink.Options{})
		if err != nil {
			b.Fatal(err)
		}
		codes[i] = l.Code
	}
	return codes
}

// BenchmarkResolveCached: links already in the in-process cache.
func BenchmarkResolveCached(b *testing.B) {
	ctx := context.Background()
	s := newService(b, testenv.NewRedis(b), shortlink.Config{FlushEvery: time.Hour})
	codes := seeded(b, s, 1024)
	for _, c := range codes { // warm, then let ristretto's buffers drain
		s.Resolve(ctx, c)
	}
	time.Sleep(50 * time.Millisecond)
	before := s.CacheStats()
	resolveParallel(b, s, codes)
	after := s.CacheStats()
	b.ReportMetric(100*float64(after.LocalHits-before.LocalHits)/float64(b.N), "local-hit-%")
}

// BenchmarkResolveRedis: the local cache off, every resolve one Redis GET.
func BenchmarkResolveRedis(b *testing.B) {
	ctx := context.Background()
	s := newService(b, testenv.NewRedis(b), shortlink.Config{LocalTTL: -1, FlushEvery: time.Hour})
	codes := seeded(b, s, 1024)
	for _, c := range codes {
		s.Resolve(ctx, c)
	}
	resolveParallel(b, s, codes)
}

// resolveParallel times only the resolves: seeding and warming are set-up.
func resolveParallel(b *testing.B, s *shortlink.Service, codes []string) {
	parallel(b, codes, s.Resolve)
}

// parallel calls resolve on codes in turn from GOMAXPROCS goroutines.
func parallel(b *testing.B, codes []string, resolve func(context.Context, string) (*shortlink.Link, error)) {
	b.ResetTimer()
	b.ReportAllocs()
	var i atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := resolve(context.Background(), codes[i.Add(1)%int64(len(codes))]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkShorten(b *testing.B) {
	ctx := context.Background()
	s := newService(b, testenv.NewRedis(b), shortlink.Config{})
	b.ReportAllocs()
	var i atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Shorten(ctx, fmt.Sprintf("https://example.com/%d", i.Add(1)), shortlink.Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRedirectHTTP: GET /{code} through the handler — with the local
// miss filter and the analytics (the defaults; flushed hourly, so the
// redirect path alone, or every second, the default, with the flushes'
// SQL on the same machine), with the analytics off
// (Config.NoAnalytics), or reading the client's miss budget from Redis
// before each lookup (Config.SharedMissCheck) — and through a bare net/http handler that only
// writes the same redirect, in one run (so -count interleaves them). The client is a load generator in another
// process (testenv.LoadGen, vegeta): the timings are the server's, not a
// client's sharing its heap and scheduler; both still share the machine.
func BenchmarkRedirectHTTP(b *testing.B) {
	r, db := testenv.NewRedis(b), testenv.NewSQL(b)
	s := newServiceOn(b, r, db, shortlink.Config{FlushEvery: time.Hour, TablesPerDB: 16})
	codes := seeded(b, s, 1024)
	shared := newServiceOn(b, r, db, shortlink.Config{FlushEvery: time.Hour, TablesPerDB: 16, SharedMissCheck: true})
	quiet := newServiceOn(b, r, db, shortlink.Config{FlushEvery: time.Hour, TablesPerDB: 16, NoAnalytics: true})
	// The default's flushes every second, whose SQL writes here share the
	// machine with the server measured (in production the database has its
	// own).
	flushing := newServiceOn(b, r, db, shortlink.Config{TablesPerDB: 16})
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "private, max-age=0")
		w.Header().Set("Location", "https://example.com/"+r.URL.Path[1:])
		w.WriteHeader(http.StatusFound)
	})
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"impl=casebook", s.Handler(nil)}, {"impl=casebook-no-analytics", quiet.Handler(nil)},
		{"impl=casebook-flush-1s", flushing.Handler(nil)}, {"impl=casebook-shared-miss-check", shared.Handler(nil)}, {"impl=bare-net-http", bare}} {
		b.Run(c.name, func(b *testing.B) {
			srv := httptest.NewServer(c.h)
			defer srv.Close()
			urls := make([]string, len(codes))
			for i, code := range codes {
				urls[i] = srv.URL + "/" + code
			}
			load := testenv.NewLoadGen(b, 8, urls)
			if _, err := load.Run(len(urls)); err != nil { // warm caches and connections
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			res, err := load.Run(b.N)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if res.Codes["302"] != b.N || len(res.Errors) > 0 {
				b.Fatalf("%d requests: status codes %v, errors %v", b.N, res.Codes, res.Errors)
			}
			b.ReportMetric(res.PerSecond(), "redirects/s")
			b.ReportMetric(float64(res.P50.Microseconds()), "p50-µs")
			b.ReportMetric(float64(res.P99.Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkObservability: the two hot paths — a Resolve answered by the
// local cache, and a redirect through the handler with the local miss
// filter (the default: answered from memory, no Redis call) — without the instrumentation
// (impl=uninstrumented, Resolve only: the baseline), with no OpenTelemetry provider
// (impl=none: what every service that set none up pays), the SDK's metrics
// (impl=metrics), its tracer sampling every span into an exporter that
// drops them (impl=traces), and both (impl=sdk), in one run.
func BenchmarkObservability(b *testing.B) {
	r, db := testenv.NewRedis(b), testenv.NewSQL(b)
	cfg := shortlink.Config{FlushEvery: time.Hour, TablesPerDB: 16}
	codes := seeded(b, newServiceOn(b, r, db, cfg), 1024)
	impls := []string{"uninstrumented", "none", "metrics", "traces", "sdk"}
	services := map[string]*shortlink.Service{}
	for _, impl := range impls {
		cfg := cfg
		if impl == "metrics" || impl == "sdk" {
			cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		}
		if impl == "traces" || impl == "sdk" {
			cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
		}
		services[impl] = newServiceOn(b, r, db, cfg)
	}
	for _, path := range []string{"resolve", "redirect"} {
		for _, impl := range impls {
			if impl == "uninstrumented" && path == "redirect" {
				continue
			}
			s := services[impl]
			b.Run("path="+path+"/impl="+impl, func(b *testing.B) {
				warm(b, s, codes)
				before := s.CacheStats()
				switch {
				case impl == "uninstrumented":
					parallel(b, codes, s.ResolveUninstrumented)
				case path == "resolve":
					resolveParallel(b, s, codes)
				default:
					redirectParallel(b, s.Handler(nil), codes)
				}
				after := s.CacheStats()
				b.ReportMetric(100*float64(after.LocalHits-before.LocalHits)/float64(b.N), "local-hit-%")
			})
		}
	}
}

// warm puts every code in s's local cache.
func warm(b *testing.B, s *shortlink.Service, codes []string) {
	for _, c := range codes {
		if _, err := s.Resolve(context.Background(), c); err != nil {
			b.Fatal(err)
		}
	}
	s.WaitLocal()
}

// redirectParallel serves GET /{code} through h in-process, into a
// ResponseWriter that keeps nothing: the handler's own cost.
func redirectParallel(b *testing.B, h http.Handler, codes []string) {
	b.ResetTimer()
	b.ReportAllocs()
	var i atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		reqs := make([]*http.Request, len(codes)) // one goroutine's: the mux writes a request's path values
		for j, c := range codes {
			reqs[j] = httptest.NewRequest("GET", "/"+c, nil)
		}
		w := &discardWriter{header: http.Header{}}
		for pb.Next() {
			h.ServeHTTP(w, reqs[i.Add(1)%int64(len(reqs))])
			if w.status != http.StatusFound {
				b.Fatalf("status %d", w.status)
			}
		}
	})
}

type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }
