package rank_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/rank"
)

// BenchmarkWrite: one script call per Set or Add, on a board of each
// encoding, against a bare go-redis ZADD and ZINCRBY on the same server in
// the same run, and against script-zadd, a script that only ZADDs — the
// floor of any write that reads, decides and writes atomically. Compare
// set and add with zadd: the ratio is what a board's write costs over the
// sorted-set command alone.
func BenchmarkWrite(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	member := newBoardWith(b, r, rank.Config{Name: "write"})
	packed := newBoardWith(b, r, rank.Config{Name: "write-packed", Epoch: epoch, Encoding: rank.EncodingPacked})
	parallel := func(b *testing.B, op func(m string, i int64) error) {
		b.ReportAllocs()
		defer startCPU(b, r.Client).report(b)
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1)
				if err := op("m"+strconv.FormatInt(i%10000, 10), i); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	raw := r.Namespace + ":raw"
	b.Run("zadd", func(b *testing.B) {
		parallel(b, func(m string, i int64) error {
			return r.Client.ZAdd(ctx, raw, redis.Z{Score: float64(i), Member: m}).Err()
		})
	})
	// The floor of any script write: EVALSHA of a script that only ZADDs.
	floor := redis.NewScript("return redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])")
	b.Run("script-zadd", func(b *testing.B) {
		parallel(b, func(m string, i int64) error { return floor.Run(ctx, r.Client, []string{raw}, i, m).Err() })
	})
	b.Run("zincrby", func(b *testing.B) {
		parallel(b, func(m string, _ int64) error { return r.Client.ZIncrBy(ctx, raw, 1, m).Err() })
	})
	for name, board := range map[string]*rank.Board{"member": member, "packed": packed} {
		b.Run(name+"/set", func(b *testing.B) {
			parallel(b, func(m string, i int64) error { _, err := board.Set(ctx, m, i%100000); return err })
		})
		b.Run(name+"/add", func(b *testing.B) {
			parallel(b, func(m string, _ int64) error { _, err := board.Add(ctx, m, 1); return err })
		})
	}
}

// BenchmarkMemoryPerMember fills a one-shard board of 100,000 members in
// each encoding and reports what Redis' MEMORY USAGE says its keys take,
// per member, beside a bare sorted set of the same members (podium's
// layout). Members are "player-<i>", scores 0..99,999.
func BenchmarkMemoryPerMember(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	r.NeedsServer(b, "MEMORY USAGE")
	const members = 100_000
	usage := func(b *testing.B, keys ...string) float64 {
		var total int64
		for _, k := range keys {
			n, err := r.Client.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				b.Fatal(err)
			}
			total += n
		}
		return float64(total) / members
	}
	fill := func(b *testing.B, board *rank.Board) {
		ups := make([]rank.Update, 0, 1000)
		for i := range members {
			ups = append(ups, rank.Update{Member: "player-" + strconv.Itoa(i), Mode: rank.Replace, Value: int64(i*7919) % 100000})
			if len(ups) == cap(ups) {
				if _, err := board.Apply(ctx, ups); err != nil {
					b.Fatal(err)
				}
				ups = ups[:0]
			}
		}
	}
	b.Run("zset", func(b *testing.B) {
		key := r.Namespace + ":bare"
		for i := 0; i < members; i += 1000 {
			zs := make([]redis.Z, 0, 1000)
			for j := i; j < i+1000; j++ {
				zs = append(zs, redis.Z{Score: float64(j * 7919 % 100000), Member: "player-" + strconv.Itoa(j)})
			}
			r.Client.ZAdd(ctx, key, zs...)
		}
		for b.Loop() {
		}
		b.ReportMetric(usage(b, key), "bytes/member")
	})
	b.Run("packed", func(b *testing.B) {
		board := newBoardWith(b, r, rank.Config{Name: "mem-packed", Epoch: epoch, Encoding: rank.EncodingPacked})
		fill(b, board)
		for b.Loop() {
		}
		b.ReportMetric(usage(b, board.Keys()[0]), "bytes/member")
	})
	b.Run("member", func(b *testing.B) {
		board := newBoardWith(b, r, rank.Config{Name: "mem-member"})
		fill(b, board)
		for b.Loop() {
		}
		key := board.Keys()[0]
		b.ReportMetric(usage(b, key, strings.TrimSuffix(key, ":rank")+":ties"), "bytes/member")
		b.ReportMetric(usage(b, key), "zset-bytes/member")
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
		board := newBoard(b, r, fmt.Sprintf("batched%d", shards), shards, testenv.Now)
		b.Run(fmt.Sprintf("board-%dshards", shards), func(b *testing.B) {
			b.ReportAllocs()
			ups := make([]rank.Update, batch)
			for i := range ups {
				ups[i] = rank.Update{Member: members[i], Mode: rank.Increment, Value: 1}
			}
			start := testenv.Now()
			for b.Loop() {
				if _, err := board.Apply(ctx, ups); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/testenv.Since(start).Seconds(), "updates/s")
		})
	}
	b.Run("raw-pipelined-zincrby", func(b *testing.B) {
		b.ReportAllocs()
		key := r.Namespace + ":rawbatch"
		start := testenv.Now()
		for b.Loop() {
			pipe := r.Client.Pipeline()
			for _, m := range members {
				pipe.ZIncrBy(ctx, key, 1, m)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*batch)/testenv.Since(start).Seconds(), "updates/s")
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

// BenchmarkRankIn: the standings of 20 friends on a board of 50,000
// members, over 1 shard and 64: two round trips either way, one script call
// per shard each.
func BenchmarkRankIn(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	for _, shards := range []int{1, 64} {
		board := populated(b, r, "rankin"+strconv.Itoa(shards), shards, 50000)
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			friends := make([]string, 20)
			i := 0
			testenv.Latencies(b, func() error {
				for j := range friends {
					i++
					friends[j] = "p" + strconv.Itoa(i*7919%50000)
				}
				got, err := board.RankIn(ctx, friends)
				if err == nil && len(got) != len(friends) {
					err = fmt.Errorf("%d standings of %d friends", len(got), len(friends))
				}
				return err
			})
		})
	}
}

func populated(b *testing.B, r *testenv.Redis, name string, shards, members int) *rank.Board {
	b.Helper()
	board := newBoard(b, r, name, shards, testenv.Now)
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

// The VsPodium benchmarks put the board beside podium's command sequence on
// one plain sorted set of the same 50,000 members, on the same server in the
// same run: on a single Redis and on the Redis Cluster (spawned, or
// CASEBOOK_REDIS_CLUSTER), with 1 caller (latency) and 16 (throughput), for
// a one-shard board and a 64-shard one. Besides ns/op they report the CPU
// an op costs, client and servers (cpu-us/op), which a busy machine
// disturbs less. Ratios come from comparing the sub-benchmarks; interleave
// rounds with -count and compare with benchstat.

// BenchmarkRankVsPodium: a member's rank and score. podium pipelines
// ZREVRANK and ZSCORE. zcount-64, for scale, is the least an exact rank over
// 64 sorted sets can send: ZSCORE, then one ZCOUNT per set, pipelined, on
// podium's members split over 64 plain sets — no ties, no decoding.
func BenchmarkRankVsPodium(b *testing.B) {
	ctx := context.Background()
	vsPodium(b, []benchOp{
		{"podium", func(f *podiumFixture, m string) error {
			pipe := f.r.Client.Pipeline()
			pipe.ZRevRank(ctx, f.raw, m)
			pipe.ZScore(ctx, f.raw, m)
			_, err := pipe.Exec(ctx)
			return err
		}},
		{"zcount-64", func(f *podiumFixture, m string) error {
			v, err := f.r.Client.ZScore(ctx, f.raw, m).Result()
			if err != nil {
				return err
			}
			above := "(" + strconv.FormatFloat(v, 'f', -1, 64)
			pipe := f.r.Client.Pipeline()
			for _, key := range f.split {
				pipe.ZCount(ctx, key, above, "+inf")
			}
			_, err = pipe.Exec(ctx)
			return err
		}},
		{"board-1", func(f *podiumFixture, m string) error { _, err := f.one.Rank(ctx, m); return err }},
		{"board-64", func(f *podiumFixture, m string) error { _, err := f.many.Rank(ctx, m); return err }},
	})
}

// BenchmarkAroundVsPodium: the 21 entries around a member (k = 10). podium
// sends ZREVRANK, ZCARD and ZREVRANGE one after the other; this baseline
// pipelines the first two.
func BenchmarkAroundVsPodium(b *testing.B) {
	ctx := context.Background()
	const k = 10
	vsPodium(b, []benchOp{
		{"podium", func(f *podiumFixture, m string) error {
			pipe := f.r.Client.Pipeline()
			rank := pipe.ZRevRank(ctx, f.raw, m)
			size := pipe.ZCard(ctx, f.raw)
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			start := max(0, min(rank.Val()-k, size.Val()-1-2*k))
			return f.r.Client.ZRevRangeWithScores(ctx, f.raw, start, start+2*k).Err()
		}},
		{"board-1", func(f *podiumFixture, m string) error { _, err := f.one.Around(ctx, m, k); return err }},
		{"board-64", func(f *podiumFixture, m string) error { _, err := f.many.Around(ctx, m, k); return err }},
	})
}

// BenchmarkTopVsPodium: the best 100, uncached. podium sends ZCARD, then
// ZREVRANGE; this baseline pipelines them.
func BenchmarkTopVsPodium(b *testing.B) {
	ctx := context.Background()
	vsPodium(b, []benchOp{
		{"podium", func(f *podiumFixture, _ string) error {
			pipe := f.r.Client.Pipeline()
			pipe.ZCard(ctx, f.raw)
			pipe.ZRevRangeWithScores(ctx, f.raw, 0, 99)
			_, err := pipe.Exec(ctx)
			return err
		}},
		{"board-1", func(f *podiumFixture, _ string) error { _, err := f.one.Top(ctx, 100); return err }},
		{"board-64", func(f *podiumFixture, _ string) error { _, err := f.many.Top(ctx, 100); return err }},
	})
}

// podiumFixture is the same members on a plain sorted set (podium's layout),
// on 64 plain sets (split by member) and on boards of 1 and 64 shards.
type podiumFixture struct {
	r         *testenv.Redis
	raw       string
	split     []string
	one, many *rank.Board
}

const podiumMembers = 50000

func newPodiumFixture(b *testing.B, r *testenv.Redis) *podiumFixture {
	b.Helper()
	ctx := context.Background()
	f := &podiumFixture{r: r, raw: r.Namespace + ":podium"}
	for i := range 64 {
		f.split = append(f.split, fmt.Sprintf("%s:{podium:%d}", r.Namespace, i))
	}
	f.one = populated(b, r, "vs1", 1, podiumMembers)
	f.many = populated(b, r, "vs64", 64, podiumMembers)
	for i := 0; i < podiumMembers; i += 1000 {
		pipe := r.Client.Pipeline()
		for j := i; j < i+1000; j++ {
			z := redis.Z{Score: float64(j * 7919 % 100000), Member: "p" + strconv.Itoa(j)}
			pipe.ZAdd(ctx, f.raw, z)
			pipe.ZAdd(ctx, f.split[j%64], z)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return f
}

// cpu is the processor time spent so far by this process and by the Redis
// servers: on a shared machine, where wall time per op swings with whatever
// else runs, CPU time per op is the steadier measure of what an op costs.
type cpu struct {
	c              redis.UniversalClient
	client, server time.Duration
}

func startCPU(b *testing.B, c redis.UniversalClient) cpu {
	m := cpu{c: c}
	m.client, m.server = processCPU(), serverCPU(b, c)
	return m
}

// report adds cpu-us/op (this process and the servers) and srv-us/op.
func (m cpu) report(b *testing.B) {
	client, server := processCPU()-m.client, serverCPU(b, m.c)-m.server
	b.ReportMetric(float64(client+server)/float64(b.N)/1e3, "cpu-us/op")
	b.ReportMetric(float64(server)/float64(b.N)/1e3, "srv-us/op")
}

func processCPU() time.Duration {
	var u syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// serverCPU sums used_cpu_user and used_cpu_sys over every node.
func serverCPU(b *testing.B, c redis.UniversalClient) time.Duration {
	ctx := context.Background()
	var total atomic.Int64
	add := func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "cpu").Result()
		for line := range strings.SplitSeq(info, "\r\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
				s, _ := strconv.ParseFloat(v, 64)
				total.Add(int64(s * 1e9))
			}
		}
		return err
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachShard(ctx, add)
	case *redis.Client:
		err = add(ctx, c)
	}
	if err != nil {
		b.Fatal(err)
	}
	return time.Duration(total.Load())
}

type benchOp struct {
	name string
	run  func(f *podiumFixture, member string) error
}

// vsPodium runs every op as backend/callers=N/name sub-benchmarks, on
// members spread over the whole board.
func vsPodium(b *testing.B, ops []benchOp) {
	for _, backend := range []string{"redis", "cluster"} {
		b.Run(backend, func(b *testing.B) {
			r := testenv.NewRedis(b)
			if backend == "cluster" {
				r = testenv.NewRedisCluster(b)
			}
			f := newPodiumFixture(b, r)
			for _, callers := range []int{1, 16} {
				for _, op := range ops {
					b.Run(fmt.Sprintf("callers=%d/%s", callers, op.name), func(b *testing.B) {
						b.ReportAllocs()
						var n atomic.Int64
						member := func() string { return "p" + strconv.FormatInt(n.Add(7919)%podiumMembers, 10) }
						defer startCPU(b, r.Client).report(b)
						if callers == 1 {
							for b.Loop() {
								if err := op.run(f, member()); err != nil {
									b.Fatal(err)
								}
							}
							return
						}
						b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								if err := op.run(f, member()); err != nil {
									b.Fatal(err)
								}
							}
						})
					})
				}
			}
		})
	}
}

// BenchmarkMigrate: one Migrate of a 100,000-member packed board of 8
// shards (filled outside the timer), nothing else writing. It reports the
// time per member and the longest step, the most one step (a ZSCAN and
// one copy script call of Chunk entries) took — about how long it holds
// its shard.
func BenchmarkMigrate(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	r.NeedsServer(b, "a 100,000-member board")
	const n = 100_000
	var longest time.Duration
	for i := range b.N {
		b.StopTimer()
		f := fillPacked(b, r, "bench-migrate-"+strconv.Itoa(i), 8, n, 0)
		board := f.board(b, testenv.Now)
		b.StartTimer()
		last := testenv.Now()
		err := board.Migrate(ctx, rank.MigrateOptions{Step: func(int, int, bool) {
			now := testenv.Now()
			longest = max(longest, now.Sub(last))
			last = now
		}})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/member")
	b.ReportMetric(float64(longest.Microseconds())/1000, "ms/longest-step")
}
