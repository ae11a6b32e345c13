package seckill

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// TestMain is in seckill_test.go (one per test binary).

// benchCampaign has stock and limits that never run out during a benchmark.
func benchCampaign(b *testing.B) (*Sale, *testenv.Redis) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	ids, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 1})
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(r.Client, testenv.NewSQL(b), Config{Namespace: r.Namespace, IDs: ids})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	sl, err := s.Create(ctx, Campaign{ID: "bench", SKU: "bench", Stock: 1 << 40, Limit: 1 << 40, Buckets: 1, Starts: time.Now().Add(-time.Minute), Ends: time.Now().Add(time.Hour)})
	if err != nil {
		b.Fatal(err)
	}
	return sl, r
}

func decisionsPerSec(b *testing.B, start time.Time, n int) {
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "decisions/s")
}

// BenchmarkBuy: one script call per buyer through Service.Buy, against the
// same script through a raw go-redis EvalSha, in one run.
func BenchmarkBuy(b *testing.B) {
	ctx := context.Background()
	sl, r := benchCampaign(b)
	var n atomic.Int64
	b.Run("service", func(b *testing.B) {
		b.ReportAllocs()
		start := time.Now()
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
		keys := sl.bucketKeys(0, "stock", "quota", "res", "due", "outbox", "seq")
		sha := buyScript.Load(ctx, r.Client).Val()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				k := strconv.FormatInt(n.Add(1), 10)
				err := r.Client.EvalSha(ctx, sha, keys, sl.c.Limit, sl.s.deadline(), sl.c.ID, 0, "r"+k, 1, "bench-0-"+k).Err()
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
	sl, r := benchCampaign(b)
	var n atomic.Int64
	b.Run("batcher", func(b *testing.B) {
		bt := sl.NewBatcher(BatchConfig{})
		defer bt.Close()
		b.ReportAllocs()
		b.SetParallelism(256)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := bt.Buy(ctx, "u"+strconv.FormatInt(n.Add(1), 10), 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		decisionsPerSec(b, start, b.N)
	})
	b.Run("raw-pipelined-evalsha", func(b *testing.B) {
		keys := sl.bucketKeys(0, "stock", "quota", "res", "due", "outbox", "seq")
		sha := buyScript.Load(ctx, r.Client).Val()
		b.ReportAllocs()
		start := time.Now()
		const depth = 128
		for i := 0; i < b.N; i += depth {
			pipe := r.Client.Pipeline()
			for range min(depth, b.N-i) {
				k := strconv.FormatInt(n.Add(1), 10)
				pipe.EvalSha(ctx, sha, keys, sl.c.Limit, sl.s.deadline(), sl.c.ID, 0, "r"+k, 1, "bench-0-"+k)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
		decisionsPerSec(b, start, b.N)
	})
}
