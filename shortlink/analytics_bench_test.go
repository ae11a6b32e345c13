package shortlink_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/internal/redisinfo"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

// clickRequests are n requests with a spread of referrers, User-Agents,
// countries and client IPs.
func clickRequests(n int) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("Referer", fakeReferrers[i%len(fakeReferrers)][0])
		r.Header.Set("User-Agent", fakeVisitors[i%len(fakeVisitors)].ua)
		r.Header.Set("CF-IPCountry", fakeCountries[i%len(fakeCountries)][0])
		r.Header.Set("X-Test-IP", fmt.Sprintf("10.0.%d.%d", i/250%250, i%250))
		reqs[i] = r
	}
	return reqs
}

// BenchmarkAnalyticsFlush: one flush of 1,000 redirects (an op) spread
// over 10 or 1,000 links, on the test's SQL and Redis; recording them is
// set-up. Reports the batch's transactions (one per link table touched),
// rollup rows upserted and HyperLogLog keys (a PFADD and an EXPIREAT each,
// in one pipeline) and, on a real Redis, the server's CPU time per flush
// (INFO cpu's main thread around the flushes; give the benchmark a private
// server, as other clients' commands count too).
func BenchmarkAnalyticsFlush(b *testing.B) {
	for _, links := range []int{10, 1000} {
		b.Run(fmt.Sprintf("links=%d", links), func(b *testing.B) {
			ctx := context.Background()
			r := testenv.NewRedis(b)
			s := newService(b, r, shortlink.Config{FlushEvery: time.Hour})
			reqs := clickRequests(1000)
			var parts, rows, keys int
			var redisCPU time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				for j, req := range reqs {
					s.RecordClick(fmt.Sprintf("c%d-%d", i%4, j%links), "https://example.com/?utm_source=x", req, req.Header.Get("X-Test-IP"))
				}
				before := serverCPU(b, r)
				b.StartTimer()
				if err := s.FlushAnalytics(ctx); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				redisCPU += serverCPU(b, r) - before
				parts, rows, keys = s.AnalyticsLastCut()
			}
			if r.Kind != devstack.Miniredis {
				b.ReportMetric(float64(redisCPU.Microseconds())/float64(b.N), "redis-µs/flush")
			}
			b.ReportMetric(float64(parts), "tx/flush")
			b.ReportMetric(float64(rows), "rows/flush")
			b.ReportMetric(float64(keys), "hll-keys/flush")
		})
	}
}

// serverCPU is the CPU time r's server has used on its main thread, or 0
// for miniredis, which does not say.
func serverCPU(b *testing.B, r *testenv.Redis) time.Duration {
	b.Helper()
	if r.Kind == devstack.Miniredis {
		return 0
	}
	info, err := r.Client.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	cpu, err := redisinfo.MainThreadCPU(info)
	if err != nil {
		b.Fatal(err)
	}
	return cpu
}

// BenchmarkAnalyticsMemory: the live rollup's heap for 10,000 links, each
// clicked 10 times in one hour with 10 referrers, User-Agents, countries
// and visitors — what a process holds between flushes per active link.
func BenchmarkAnalyticsMemory(b *testing.B) {
	s := newService(b, testenv.NewRedis(b), shortlink.Config{FlushEvery: time.Hour})
	reqs := clickRequests(10)
	const links = 10_000
	var perLink float64
	b.ReportAllocs()
	for range b.N {
		s.DiscardAnalytics()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for l := range links {
			for _, r := range reqs {
				s.RecordClick(fmt.Sprintf("code%05d", l), "https://example.com/", r, r.Header.Get("X-Test-IP"))
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perLink = float64(after.HeapAlloc-before.HeapAlloc) / links
	}
	b.ReportMetric(perLink, "B/link")
}

// BenchmarkRedirectAnalytics: GET /{code} through the handler in-process,
// with a Referer, User-Agent, country and client IP, with the analytics on
// (the default) and off (Config.NoAnalytics), in one run.
func BenchmarkRedirectAnalytics(b *testing.B) {
	r, db := testenv.NewRedis(b), testenv.NewSQL(b)
	cfg := shortlink.Config{FlushEvery: time.Hour, TablesPerDB: 16}
	codes := seeded(b, newServiceOn(b, r, db, cfg), 1024)
	off := cfg
	off.NoAnalytics = true
	for _, c := range []struct {
		name string
		cfg  shortlink.Config
	}{{"impl=analytics-on", cfg}, {"impl=analytics-off", off}} {
		s := newServiceOn(b, r, db, c.cfg)
		b.Run(c.name, func(b *testing.B) {
			warm(b, s, codes)
			h := s.Handler(testIP)
			b.ResetTimer()
			b.ReportAllocs()
			var i atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				reqs := clickRequests(len(codes))
				for j, code := range codes {
					reqs[j].URL.Path, reqs[j].RequestURI = "/"+code, "/"+code
				}
				w := &discardWriter{header: http.Header{}}
				for pb.Next() {
					h.ServeHTTP(w, reqs[i.Add(1)%int64(len(reqs))])
					if w.status != http.StatusFound {
						b.Fatalf("status %d", w.status)
					}
				}
			})
		})
	}
}

// BenchmarkAnalyticsRecord: recording one click in the rollup, as a
// redirect does after its lookup (classifying the headers, then the map
// updates), from GOMAXPROCS goroutines over 1,024 links.
func BenchmarkAnalyticsRecord(b *testing.B) {
	s := newService(b, testenv.NewRedis(b), shortlink.Config{FlushEvery: time.Hour})
	reqs := clickRequests(1024)
	codes := make([]string, len(reqs))
	for i := range codes {
		codes[i] = fmt.Sprintf("code%04d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1) % int64(len(reqs))
			s.RecordClick(codes[i], "https://example.com/", reqs[i], reqs[i].Header.Get("X-Test-IP"))
		}
	})
}
