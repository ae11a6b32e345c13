package main

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/devcore"
	"github.com/casebook-dev/casebook/rank"
	"github.com/casebook-dev/casebook/shard"
	"github.com/casebook-dev/casebook/signin"
)

// measurements lists every throughput measurement the harness knows, in the
// order it runs them. Scenario sizings refer to them by name; a sizing whose
// block is not built yet names a measurement missing from this list.
func measurements() []Measurement {
	return []Measurement{
		redisSetBaseline(),
		snowflakeIDs(),
		segmentIDs(),
		shortCodes(),
		shardRoutes(),
		withBaseline(withFootprint(rankAdd(), zsetMembers), "redis.set"),
		withBaseline(rankRank(), "redis.set"),
		withBaseline(withFootprint(signinSign(), userYears), "redis.set"),
		withBaseline(signinRead(), "redis.set"),
		withBaseline(seckillBuy("seckill.buy", false), "redis.set"),
		withBaseline(seckillBuy("seckill.buy.batched", true), "seckill.buy"),
		shortlinkResolve("shortlink.resolve", "resolves (in-process cache hit)", "local"),
		shortlinkResolve("shortlink.resolve.sql", "resolves (SQL read, incl. a DEL)", "sql"),
		httpRedirects("http.bare", "redirects (bare net/http baseline)", true),
		withBaseline(httpRedirects("shortlink.redirect", "redirects (handler over loopback)", false), "http.bare"),
		withBaseline(shortlinkResolve("shortlink.resolve.redis", "resolves (Redis hit)", "redis"), "redis.set"),
		orderCreate(),
		withBaseline(seckillSoldOut(), "seckill.buy.batched"),
		withBaseline(seckillOrders(), "order.create"),
		withBaseline(redpacketOpen(), "redis.set"),
		withBaseline(redpacketOpenBatched(), "redpacket.grab"),
		withBaseline(feedRead(), "redis.set"),
		hotlistEvents(), hotlistReads(),
	}
}

// rankAdd is one Board.Add per call (a Lua script), four callers, on the
// chosen Redis.
func rankAdd() Measurement {
	return onRedis("rank.add", "score writes (un-batched)", redisWorkers, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		board, err := rank.New(r.Client, rank.Config{Name: "bench", Namespace: ns, Epoch: time.Now().Add(-time.Second)})
		if err != nil {
			return nil, err
		}
		var n atomic.Uint64
		return func() error {
			_, err := board.Add(ctx, "m"+strconv.FormatUint(n.Add(1)%10000, 10), 1)
			return err
		}, nil
	})
}

// rankRank is one Board.Rank per call (a member's global rank and score,
// one script) on a board of 10,000 members, four callers: the Redis side
// of a board view, whose top of the board comes from the in-process cache.
func rankRank() Measurement {
	return onRedis("rank.rank", "own-rank reads (10k members)", redisWorkers, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		board, err := rank.New(r.Client, rank.Config{Name: "bench", Namespace: ns})
		if err != nil {
			return nil, err
		}
		const members = 10_000
		for i := range members / 500 {
			batch := make([]rank.Update, 500)
			for j := range batch {
				batch[j] = rank.Update{Member: "m" + strconv.Itoa(i*500+j), Mode: rank.Replace, Value: int64((i*500 + j) * 7919 % 100_000)}
			}
			if _, err := board.Apply(ctx, batch); err != nil {
				return nil, err
			}
		}
		var n atomic.Uint64
		return func() error {
			_, err := board.Rank(ctx, "m"+strconv.FormatUint(n.Add(1)%members, 10))
			return err
		}, nil
	})
}

// signinSign is one Sign per call (bit, streak and reward outbox in one
// script), each a new user-day, four callers.
func signinSign() Measurement {
	return onRedis("signin.sign", "sign-ins", redisWorkers, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		s, err := signin.New(r.Client, signin.Config{Namespace: ns})
		if err != nil {
			return nil, err
		}
		at := signinDay()
		var n atomic.Int64
		return func() error {
			i := n.Add(1)
			_, err := s.Sign(ctx, "u"+strconv.FormatInt(i%100000, 10), at.AddDate(0, 0, int(i/100000)))
			return err
		}, nil
	})
}

// signinDay is the first day the sign-in measurements write: noon UTC on
// January 1st of this year, so that a run's days stay in this year's keys
// (a year whose keys have expired refuses sign-ins).
func signinDay() time.Time {
	return time.Date(time.Now().UTC().Year(), 1, 1, 12, 0, 0, 0, time.UTC)
}

// signinRead is one month's calendar per call (History over 31 days, one
// read) of 2,000 users who each signed 11 of those days, four callers.
func signinRead() Measurement {
	return onRedis("signin.read", "calendar reads (a month each)", redisWorkers, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		s, err := signin.New(r.Client, signin.Config{Namespace: ns})
		if err != nil {
			return nil, err
		}
		const users = 2_000
		first := signinDay()
		pipe := make(chan error, 64)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for u := w; u < users; u += 8 {
					for d := 0; d < 31; d += 3 {
						if _, err := s.Sign(ctx, "u"+strconv.Itoa(u), first.AddDate(0, 0, d)); err != nil {
							select {
							case pipe <- err:
							default:
							}
							return
						}
					}
				}
			})
		}
		wg.Wait()
		select {
		case err := <-pipe:
			return nil, err
		default:
		}
		from, to := signin.DateOf(first, time.UTC), signin.DateOf(first.AddDate(0, 0, 30), time.UTC)
		var n atomic.Uint64
		return func() error {
			_, err := s.History(ctx, "u"+strconv.FormatUint(n.Add(1)%users, 10), from, to)
			return err
		}, nil
	})
}

// redisWorkers is the closed loop of the Redis-bound measurements of one
// call per operation. They are sized by the server's CPU per operation, and
// that CPU depends on how many clients keep the server busy: with few, the
// server sleeps and wakes for nearly every command. redis-benchmark -q -t
// set -n 200000 against a private redis-server 7.0 on this 2-core VM, INFO
// cpu read around each run, cost 47.5 µs of server CPU a SET with 1 client,
// 13.2-27.2 µs with 4 (three runs), 7.7-8.0 µs with 16 and 8.5 µs with 64.
// From 16 clients on, the figure is the operation's and not the load
// generator's (TestSizingStableAcrossWorkers compares 16 with 64).
const redisWorkers = 16

// onRedis wraps an operation on the chosen Redis, under a fresh key
// namespace that is deleted afterwards.
func onRedis(name, unit string, workers int, setup func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error)) Measurement {
	return Measurement{Name: name, Unit: unit, Tier: TierRedis, Setup: func(ctx context.Context, env *Env) (Prepared, error) {
		r, err := env.Redis(ctx)
		if err != nil {
			return Prepared{}, err
		}
		ns := "casebook:bench:" + strconv.FormatInt(time.Now().UnixNano(), 36)
		op, err := setup(ctx, env, r, ns)
		cleanup := func() { devcore.DeleteKeys(context.Background(), r.Client, ns+"*") }
		return Prepared{Op: op, Workers: workers, Backend: describeRedis(r), Cleanup: cleanup, Namespace: ns}, err
	}}
}

func withBaseline(m Measurement, baseline string) Measurement {
	m.Baseline = baseline
	return m
}

// inProcess wraps an operation that needs no devcore.
func inProcess(name, unit string, workers int, setup func(ctx context.Context) (func() error, error)) Measurement {
	return Measurement{Name: name, Unit: unit, Tier: TierApp, Setup: func(ctx context.Context, _ *Env) (Prepared, error) {
		op, err := setup(ctx)
		return Prepared{Op: op, Workers: workers, Backend: "in-process"}, err
	}}
}

// snowflakeIDs: one node, all cores asking; bwmarrin caps a node at 4096/ms.
func snowflakeIDs() Measurement {
	return inProcess("idgen.snowflake", "ids (one node)", 0, func(ctx context.Context) (func() error, error) {
		s, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 1})
		if err != nil {
			return nil, err
		}
		return func() error { _, err := s.Next(ctx); return err }, nil
	})
}

// segmentIDs leases from the chosen Redis; the steady state is in-process,
// so more ids take more app nodes, not more Redis.
func segmentIDs() Measurement {
	m := onRedis("idgen.segment", "ids (one allocator)", 1, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		seg, err := idgen.NewSegment(ctx, idgen.NewRedisSource(r.Client, ns), idgen.SegmentConfig{Tag: "bench", Step: 1_000_000})
		if err != nil {
			return nil, err
		}
		return func() error { _, err := seg.Next(ctx); return err }, nil
	})
	m.Tier = TierApp
	return m
}

func shortCodes() Measurement {
	return inProcess("idgen.shortcode", "codes (one core)", 1, func(context.Context) (func() error, error) {
		codes, err := idgen.NewShortCodes(nil, idgen.ShortCodeConfig{Key: 1})
		if err != nil {
			return nil, err
		}
		var n uint64
		return func() error { n++; _, err := codes.Encode(n); return err }, nil
	})
}

func shardRoutes() Measurement {
	return inProcess("shard.route", "routes (one core, 8×32)", 1, func(context.Context) (func() error, error) {
		r, err := shard.New(make([]*sqlx.DB, 8), shard.Config{Table: "orders", TablesPerDB: 32})
		if err != nil {
			return nil, err
		}
		keys := make([]string, 1024)
		for i := range keys {
			keys[i] = "user-" + strconv.Itoa(i*7919)
		}
		i := 0
		return func() error { r.ByKey(keys[i&1023]); i++; return nil }, nil
	})
}

// redisSetBaseline is the raw go-redis SET rate on the chosen Redis from one
// connection per core: what one un-pipelined round trip costs here, the
// yardstick for every Redis-backed block.
func redisSetBaseline() Measurement {
	return onRedis("redis.set", "SETs (raw go-redis baseline)", redisWorkers, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		var n atomic.Uint64
		return func() error {
			return r.Client.Set(ctx, ns+":"+strconv.FormatUint(n.Add(1)%1024, 10), "v", 0).Err()
		}, nil
	})
}

// userYears counts sign-in records: a bitmap key is one user-year; a packed
// hash holds one per field. Outbox streams and the buckets' layout records
// are not records.
func userYears(ctx context.Context, node *redis.Client, typ, key string) (int64, error) {
	if strings.HasSuffix(key, ":layout") {
		return 0, nil
	}
	switch typ {
	case "string":
		return 1, nil
	case "hash":
		return node.HLen(ctx, key).Result()
	}
	return 0, nil
}
