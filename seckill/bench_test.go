package seckill

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/redisinfo"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
)

// TestMain is in seckill_test.go (one per test binary).

// benchSale is a campaign whose stock and limits never run out during a
// benchmark.
func benchSale(b *testing.B, r *testenv.Redis, cfg Config) *Sale {
	ctx := context.Background()
	ids, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 1})
	if err != nil {
		b.Fatal(err)
	}
	cfg.Namespace, cfg.IDs = r.Namespace, ids
	dbs := testenv.NewSQLs(b, 1)
	orders, err := order.New(r.Client, dbs, order.Config{Namespace: r.Namespace})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { orders.Close() })
	if err := orders.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	s, err := New(r.Client, dbs[0], orders, cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	sl, err := s.Create(ctx, Campaign{ID: "bench", SKU: "bench", Price: 1, Stock: 1 << 40, Limit: 1 << 40, Buckets: 1, Starts: testenv.Now().Add(-time.Minute), Ends: testenv.Now().Add(time.Hour)})
	if err != nil {
		b.Fatal(err)
	}
	return sl
}

// rawBuy is what decide sends to the buy script for buyer i alone.
func rawBuy(sl *Sale, i int64) ([]string, []any) {
	return sl.buyCall(0, i, []request{{user: "r" + strconv.FormatInt(i, 10), qty: 1}})
}

func decisionsPerSec(b *testing.B, start time.Time, n int) {
	b.ReportMetric(float64(n)/testenv.Since(start).Seconds(), "decisions/s")
}

// BenchmarkBuy: one script call per buyer through Service.Buy, against the
// same script through a raw go-redis EvalSha, in one run.
func BenchmarkBuy(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	sl := benchSale(b, r, Config{})
	var n atomic.Int64
	b.Run("service", func(b *testing.B) {
		b.ReportAllocs()
		start := testenv.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := sl.Buy(ctx, "u"+strconv.FormatInt(n.Add(1), 10), 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		decisionsPerSec(b, start, b.N)
	})
	b.Run("raw-evalsha", func(b *testing.B) {
		b.ReportAllocs()
		sha := buyScript.Load(ctx, r.Client).Val()
		start := testenv.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				keys, args := rawBuy(sl, n.Add(1))
				err := r.Client.EvalSha(ctx, sha, keys, args...).Err()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		decisionsPerSec(b, start, b.N)
	})
}

// BenchmarkBuyBatched: many concurrent buyers through the Batcher, against
// the same script in go-redis pipelines of 128 EvalSha calls.
func BenchmarkBuyBatched(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	sl := benchSale(b, r, Config{})
	var n atomic.Int64
	b.Run("batcher", func(b *testing.B) { buyBatched(b, sl, "u", &n) })
	b.Run("raw-pipelined-evalsha", func(b *testing.B) {
		sha := buyScript.Load(ctx, r.Client).Val()
		b.ReportAllocs()
		start := testenv.Now()
		const depth = 128
		for i := 0; i < b.N; i += depth {
			pipe := r.Client.Pipeline()
			for range min(depth, b.N-i) {
				keys, args := rawBuy(sl, n.Add(1))
				pipe.EvalSha(ctx, sha, keys, args...)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
		decisionsPerSec(b, start, b.N)
	})
}

// BenchmarkBuyWait: one buyer per call on a Redis Cluster (one replica per
// master), answering at once or after WAIT 1 (Config.WaitReplicas).
func BenchmarkBuyWait(b *testing.B) {
	ctx := context.Background()
	for _, replicas := range []int{0, 1} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			sl := benchSale(b, testenv.NewRedisCluster(b), Config{WaitReplicas: replicas, WaitTimeout: time.Second})
			var n atomic.Int64
			b.ReportAllocs()
			b.ResetTimer() // the first call spawns the cluster
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := sl.Buy(ctx, "u"+strconv.FormatInt(n.Add(1), 10), 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkObservability: the batched buy with no OpenTelemetry provider
// (impl=none: what every service that set none up pays), with the SDK's
// metrics (impl=metrics), its tracer sampling every span into an exporter
// that drops them (impl=traces), and both (impl=sdk), in one run.
func BenchmarkObservability(b *testing.B) {
	for _, impl := range []string{"none", "metrics", "traces", "sdk"} {
		r := testenv.NewRedis(b)
		cfg := Config{}
		if impl == "metrics" || impl == "sdk" {
			cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		}
		if impl == "traces" || impl == "sdk" {
			cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
		}
		sl := benchSale(b, r, cfg)
		var n atomic.Int64
		b.Run("impl="+impl, func(b *testing.B) { buyBatched(b, sl, impl, &n) })
	}
}

// buyBatched buys one unit per op through a Batcher from 256 goroutines per
// core, each buyer new (prefix and n).
func buyBatched(b *testing.B, sl *Sale, prefix string, n *atomic.Int64) {
	ctx := context.Background()
	bt := sl.NewBatcher(BatchConfig{})
	defer bt.Close()
	b.ReportAllocs()
	b.SetParallelism(256)
	start := testenv.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := bt.Buy(ctx, prefix+strconv.FormatInt(n.Add(1), 10), 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	decisionsPerSec(b, start, b.N)
}

// BenchmarkDecisionCost: the server's time per decision inside the buy
// script (commandstats' EVALSHA usec after CONFIG RESETSTAT, divided by
// the decisions) for calls of 256 new buyers — what a Batcher sends under
// load — beside a whole unbatched Lua stock deduct (GET, compare, DECRBY:
// one EVALSHA per buyer) and a Lua loop of 10 million steps, all on one
// private redis-server in one run. Run it alone:
//
//	go test -run '^$' -bench DecisionCost -benchtime 20000x ./seckill
func BenchmarkDecisionCost(b *testing.B) {
	ctx := context.Background()
	r, _ := testenv.NewPrivateRedis(b)
	sl := benchSale(b, r, Config{})
	var users atomic.Int64
	b.Run("impl=batch-256", func(b *testing.B) {
		const per = 256
		reqs := make([]request, per)
		resetStats(b, r)
		for done := 0; done < b.N; done += per {
			reqs = reqs[:min(per, b.N-done)]
			for i := range reqs {
				reqs[i] = request{user: "u" + strconv.FormatInt(users.Add(1), 10), qty: 1}
			}
			n, err := sl.batchNumber(ctx)
			if err != nil {
				b.Fatal(err)
			}
			out, err := sl.decideOnce(ctx, 0, n, reqs)
			if err != nil || strings.Count(out, "R") != len(reqs) {
				b.Fatalf("decided %q: %v", out, err)
			}
		}
		b.ReportMetric(scriptMicros(b, r)/float64(b.N), "script-µs/decision")
	})
	b.Run("impl=lua-deduct", func(b *testing.B) {
		deduct := redis.NewScript(`local s = tonumber(redis.call('GET', KEYS[1]))
if s and s >= tonumber(ARGV[1]) then redis.call('DECRBY', KEYS[1], ARGV[1]) return 1 end
return 0`)
		key := sl.key(0, "deduct-bench")
		if err := r.Client.Set(ctx, key, 1<<40, 0).Err(); err != nil {
			b.Fatal(err)
		}
		if err := deduct.Load(ctx, r.Client).Err(); err != nil {
			b.Fatal(err)
		}
		resetStats(b, r)
		for b.Loop() {
			if err := deduct.EvalSha(ctx, r.Client, []string{key}, 1).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(scriptMicros(b, r)/float64(b.N), "script-µs/decision")
	})
	// Five loops whatever -benchtime says: each takes tens of milliseconds.
	b.Run("impl=lua-loop-10M", func(b *testing.B) {
		resetStats(b, r)
		for range 5 {
			if err := r.Client.Eval(ctx, "local x = 0 for i = 1, 10000000 do x = x + i end return x", nil).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(scriptMicros(b, r)/1e3/5, "script-ms/loop")
	})
}

func resetStats(b *testing.B, r *testenv.Redis) {
	if err := r.Client.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
}

// scriptMicros is the µs commandstats counts in EVAL and EVALSHA.
func scriptMicros(b *testing.B, r *testenv.Redis) float64 {
	info, err := r.Client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	m := redisinfo.CommandMicros(info)
	return m["evalsha"] + m["eval"]
}
