package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/devcore"
	"github.com/casebook-dev/casebook/internal/keys"
)

// Footprint is what a measurement's run left stored, sampled from the
// server afterwards: Bytes over Records is the measured size of one record
// (Storage.MeasuredBy names it).
type Footprint struct {
	Records float64 `json:"records"`
	Bytes   float64 `json:"bytes"`
	How     string  `json:"how"` // how Bytes was read
}

// PerRecord is the measured bytes per record.
func (f Footprint) PerRecord() float64 { return f.Bytes / f.Records }

// withFootprint makes an onRedis measurement sample its keys after the run
// (see redisFootprint).
func withFootprint(m Measurement, records func(ctx context.Context, node *redis.Client, typ, key string) (int64, error)) Measurement {
	setup := m.Setup
	m.Setup = func(ctx context.Context, env *Env) (Prepared, error) {
		p, err := setup(ctx, env)
		if err == nil && env.redis != nil && p.Namespace != "" {
			r, ns := env.redis, p.Namespace
			p.Footprint = func(ctx context.Context) (Footprint, error) { return redisFootprint(ctx, r, ns, records) }
		}
		return p, err
	}
	return m
}

// errNoMemoryUsage is why nothing is sampled on miniredis, in words for the
// report: it implements no MEMORY USAGE.
var errNoMemoryUsage = errors.New("miniredis cannot say how much memory a key takes (it has no MEMORY USAGE)")

// redisFootprint sums MEMORY USAGE (every element sampled) over the keys
// under ns for which records counts any, on every primary: the records'
// own keys, their encodings' overhead and the key names a real deployment
// also pays, without the measurement's other keys (outbox streams,
// request ids).
func redisFootprint(ctx context.Context, r *devcore.Redis, ns string, records func(ctx context.Context, node *redis.Client, typ, key string) (int64, error)) (Footprint, error) {
	if r.Kind == devcore.Miniredis {
		return Footprint{}, errNoMemoryUsage
	}
	var (
		mu sync.Mutex
		f  = Footprint{How: "MEMORY USAGE … SAMPLES 0 of the records' keys"}
	)
	sample := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, ns+"*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			typ, err := node.Type(ctx, key).Result()
			if err != nil {
				return err
			}
			n, err := records(ctx, node, typ, key)
			if err != nil || n == 0 {
				continue // gone (expired) or not a record's key
			}
			b, err := node.MemoryUsage(ctx, key, 0).Result()
			if err != nil {
				return fmt.Errorf("MEMORY USAGE: %w", err)
			}
			mu.Lock()
			f.Records += float64(n)
			f.Bytes += float64(b)
			mu.Unlock()
		}
		return iter.Err()
	}
	err := keys.EachPrimary(ctx, r.Client, sample)
	if err == nil && f.Records == 0 {
		err = fmt.Errorf("no records stored under %s", ns)
	}
	return f, err
}

// zsetMembers counts a sorted set's members as records.
func zsetMembers(ctx context.Context, node *redis.Client, typ, key string) (int64, error) {
	if typ != "zset" {
		return 0, nil
	}
	return node.ZCard(ctx, key).Result()
}
