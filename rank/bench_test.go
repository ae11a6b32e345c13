package rank_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/rank"
)

// BenchmarkAdd: one script call per Add, against a raw go-redis ZINCRBY on the
// same server in the same run.
func BenchmarkAdd(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	board := newBoard(b, r, "add", 1, time.Now)
	b.Run("board", func(b *testing.B) {
		b.ReportAllocs()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := board.Add(ctx, "m"+strconv.FormatInt(n.Add(1)%10000, 10), 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("raw-zincrby", func(b *testing.B) {
		b.ReportAllocs()
		var n atomic.Int64
		key := r.Namespace + ":raw"
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := r.Client.ZIncrBy(ctx, key, 1, "m"+strconv.FormatInt(n.Add(1)%10000, 10)).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkAddBatched: 1000 updates per Apply, against 1000 ZINCRBYs in one
// raw go-redis pipeline. The metric is updates/s.
func BenchmarkAddBatched(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	const batch = 1000
	members := make([]string, batch)
	for i := range members {
		members[i] = "m" + strconv.Itoa(i*7)
	}
	for _, shards := range []int{1, 8} {
		board := newBoard(b, r, fmt.Sprintf("batched%d", shards), shards, time.Now)
		b.Run(fmt.Sprintf("board-%dshards", shards), func(b *testing.B) {
			b.ReportAllocs()
			ups := make([]rank.Update, batch)
			for i := range ups {
				ups[i] = rank.Update{Member: members[i], Mode: rank.Increment, Value: 1}
			}
			start := time.Now()
			for b.Loop() {
				if _, err := board.Apply(ctx, ups); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "updates/s")
		})
	}
	b.Run("raw-pipelined-zincrby", func(b *testing.B) {
		b.ReportAllocs()
		key := r.Namespace + ":rawbatch"
		start := time.Now()
		for b.Loop() {
			pipe := r.Client.Pipeline()
			for _, m := range members {
				pipe.ZIncrBy(ctx, key, 1, m)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "updates/s")
	})
}

func BenchmarkTopCached(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	board := populated(b, r, "cached", 8, 10000)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if top, err := board.TopCached(ctx, 100); err != nil || len(top) != 100 {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkTopSharded64(b *testing.B) {
	ctx := context.Background()
	board := populated(b, testenv.NewRedis(b), "top64", 64, 50000)
	testenv.Latencies(b, func() error {
		top, err := board.Top(ctx, 100)
		if err == nil && len(top) != 100 {
			err = fmt.Errorf("top has %d entries", len(top))
		}
		return err
	})
}

func BenchmarkRankSharded64(b *testing.B) {
	ctx := context.Background()
	board := populated(b, testenv.NewRedis(b), "rank64", 64, 50000)
	i := 0
	testenv.Latencies(b, func() error {
		i++
		_, err := board.Rank(ctx, "p"+strconv.Itoa(i*7919%50000))
		return err
	})
}

func populated(b *testing.B, r *testenv.Redis, name string, shards, members int) *rank.Board {
	b.Helper()
	board := newBoard(b, r, name, shards, time.Now)
	ups := make([]rank.Update, 0, 1000)
	for i := range members {
		ups = append(ups, rank.Update{Member: "p" + strconv.Itoa(i), Mode: rank.Replace, Value: int64(i*7919) % 100000})
		if len(ups) == cap(ups) || i == members-1 {
			if _, err := board.Apply(context.Background(), ups); err != nil {
				b.Fatal(err)
			}
			ups = ups[:0]
		}
	}
	return board
}

// BenchmarkRankVsPodium: a member's rank and score, side by side in one
// run, 16 callers: podium's command sequence on a plain sorted set (ZREVRANK
// and ZSCORE, pipelined), a one-shard board, a 64-shard board.
// Interleave rounds with -count and compare with benchstat.
func BenchmarkRankVsPodium(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	const members = 50000
	one := populated(b, r, "vs1", 1, members)
	many := populated(b, r, "vs64", 64, members)
	raw := r.Namespace + ":podium"
	for i := 0; i < members; i += 1000 {
		var zs []redis.Z
		for j := i; j < i+1000; j++ {
			zs = append(zs, redis.Z{Score: float64(j * 7919 % 100000), Member: "p" + strconv.Itoa(j)})
		}
		r.Client.ZAdd(ctx, raw, zs...)
	}
	run := func(name string, op func(member string) error) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := op("p" + strconv.FormatInt(n.Add(7919)%members, 10)); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
	run("podium", func(m string) error {
		pipe := r.Client.Pipeline()
		pipe.ZRevRank(ctx, raw, m)
		pipe.ZScore(ctx, raw, m)
		_, err := pipe.Exec(ctx)
		return err
	})
	run("board-1", func(m string) error { _, err := one.Rank(ctx, m); return err })
	run("board-64", func(m string) error { _, err := many.Rank(ctx, m); return err })
}
