package signin_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/signin"
)

// BenchmarkSign: one script call per sign-in (bit, streak, outbox) in each
// layout, against a raw go-redis SETBIT on the same server in the same run.
// Each layout also reports what Redis spends on a user-year (MEMORY USAGE,
// outboxes drained), measured on 128 users signed every day of a leap year:
// the seed's bits are 46 bytes.
func BenchmarkSign(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	at := testenv.Now().UTC().Truncate(time.Hour)
	const users = 10000
	for _, layout := range []struct {
		name string
		signin.Layout
	}{{"bitmap", signin.Bitmaps}, {"packed", signin.Packed}} {
		// 10,000 users, so that Packed's hashes (sized for them) are soon
		// full, about 50 users of 42 bytes each, as in production.
		s, err := signin.New(r.Client, signin.Config{Namespace: r.Namespace + ":" + layout.name, Layout: layout.Layout, Users: users})
		if err != nil {
			b.Fatal(err)
		}
		var perUserYear float64
		b.Run(layout.name, func(b *testing.B) {
			if perUserYear == 0 {
				perUserYear = memoryPerUserYear(b, r, layout.Layout)
				b.ResetTimer()
			}
			b.ReportAllocs()
			defer serverTime(b, r, "evalsha", "eval")()
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					// Each call a new user-day, so every call writes a reward.
					i := n.Add(1)
					if _, err := s.Sign(ctx, "u"+strconv.FormatInt(i%users, 10), at.AddDate(0, 0, int(i/users))); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.ReportMetric(perUserYear, "bytes/user-year")
		})
	}
	b.Run("raw-setbit", func(b *testing.B) {
		b.ReportAllocs()
		defer serverTime(b, r, "setbit")()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1)
				if err := r.Client.SetBit(ctx, r.Namespace+":raw:u"+strconv.FormatInt(i%users, 10), 333, 1).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkObservability: Sign (Bitmaps) with no OpenTelemetry provider
// (impl=none: what every service that set none up pays), with the SDK's
// metrics (impl=metrics), its tracer sampling every span into an exporter
// that drops them (impl=traces), and both (impl=sdk), in one run, one caller
// per core, every call a new user-day (each writes a reward task).
func BenchmarkObservability(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	at := testenv.Now().UTC().Truncate(time.Hour)
	const users = 10000
	for _, impl := range []string{"none", "metrics", "traces", "sdk"} {
		cfg := signin.Config{Namespace: r.Namespace + ":" + impl}
		if impl == "metrics" || impl == "sdk" {
			cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		}
		if impl == "traces" || impl == "sdk" {
			cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
		}
		s, err := signin.New(r.Client, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		var n atomic.Int64
		b.Run("impl="+impl, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if _, err := s.Sign(ctx, "u"+strconv.FormatInt(i%users, 10), at.AddDate(0, 0, int(i/users))); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// memoryPerUserYear signs 128 users in on every day of a leap year (y0+2) in a namespace
// of their own and returns MEMORY USAGE per user-year (0 on miniredis, which
// has none).
func memoryPerUserYear(b *testing.B, r *testenv.Redis, layout signin.Layout) float64 {
	if r.Kind == devstack.Miniredis {
		return 0
	}
	ns := r.Namespace + ":memory-" + layout.String()
	s, err := signin.New(r.Client, signin.Config{Namespace: ns, Buckets: 1, Layout: layout, Users: 128})
	if err != nil {
		b.Fatal(err)
	}
	users := numberedUsers(128)
	signYear(b, s, users, y0+2, 1)
	return float64(measureMemory(b, r, ns, s).years) / float64(len(users))
}

// serverTime, deferred as serverTime(…)(), reports the server's own time per
// command of the given kinds (INFO commandstats) across the benchmark: what a
// call costs Redis, free of the client's scheduling on a busy machine. On a
// server shared with other work it includes their commands of those kinds.
func serverTime(b *testing.B, r *testenv.Redis, commands ...string) func() {
	if r.Kind == devstack.Miniredis {
		return func() {}
	}
	before := commandStats(b, r, commands)
	return func() {
		after := commandStats(b, r, commands)
		if calls := after[0] - before[0]; calls > 0 {
			b.ReportMetric(float64(after[1]-before[1])/float64(calls), "server-µs/op")
		}
	}
}

// commandStats sums calls and microseconds of commands from INFO commandstats.
func commandStats(b *testing.B, r *testenv.Redis, commands []string) [2]int64 {
	info, err := r.Client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum [2]int64
	for _, line := range strings.Split(info, "\r\n") {
		name, stats, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !slices.Contains(commands, name) {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				sum[0] += n
			case "usec":
				sum[1] += n
			}
		}
	}
	return sum
}
