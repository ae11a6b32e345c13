package main

import (
	"context"
	"strconv"
	"sync/atomic"
)

// measurements lists every throughput measurement the harness knows, in the
// order it runs them. Scenario sizings refer to them by name; a sizing whose
// block is not built yet names a measurement missing from this list.
func measurements() []Measurement {
	return []Measurement{
		redisSetBaseline(),
	}
}

// redisSetBaseline is the raw go-redis SET rate on the chosen Redis from one
// connection per core: what one un-pipelined round trip costs here, the
// yardstick for every Redis-backed block.
func redisSetBaseline() Measurement {
	m := Measurement{Name: "redis.set", Unit: "SETs (raw go-redis baseline)"}
	m.Setup = func(ctx context.Context, env *Env) (Prepared, error) {
		r, err := env.Redis(ctx)
		if err != nil {
			return Prepared{}, err
		}
		var n atomic.Uint64
		key := "casebook:bench:set:"
		op := func() error {
			return r.Client.Set(ctx, key+strconv.FormatUint(n.Add(1)%1024, 10), "v", 0).Err()
		}
		cleanup := func() {
			for i := range 1024 {
				r.Client.Del(ctx, key+strconv.Itoa(i))
			}
		}
		return Prepared{Op: op, Workers: 4, Backend: describe(r.Kind, r.Addrs...), Cleanup: cleanup}, nil
	}
	return m
}
