package main

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/internal/devcore"
)

// hotlistParts is how many partitions (claims) the hot-list measurements use.
const hotlistParts = 8

// hotlistEvents measures events aggregated per second by one aggregator:
// decoded, weighed, summed per item in memory, and flushed into the chosen
// Redis when due (every second, or at 10,000 pending items). One operation is
// one event: the events arrive as batches of 1000 (one Kafka message each),
// so every 1000th operation takes a whole batch — the other 999 only count —
// and the rate is events per second. Kafka itself is not in the loop (see
// hotkafka's BenchmarkIngest for that).
func hotlistEvents() Measurement {
	return onRedis("hotlist.event", "events aggregated (and flushed)", 2, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		l, err := hotlist.New(r.Client, hotlist.Config{Name: "bench", Namespace: ns, Partitions: hotlistParts})
		if err != nil {
			return nil, err
		}
		agg, err := hotlist.NewAggregator(l, hotlist.AggregatorConfig{})
		if err != nil {
			return nil, err
		}
		batches, err := hotlistBatches(64)
		if err != nil {
			return nil, err
		}
		type claim struct {
			sync.Mutex
			c    *hotlist.Claim
			next int64
		}
		claims := make([]*claim, hotlistParts)
		for p := range claims {
			c, err := agg.Claim(ctx, int32(p))
			if err != nil {
				return nil, err
			}
			claims[p] = &claim{c: c, next: c.Resume()}
		}
		var n atomic.Int64
		return func() error {
			i := n.Add(1)
			if i%1000 != 0 {
				return nil
			}
			b := i / 1000
			cl := claims[b%hotlistParts]
			cl.Lock()
			defer cl.Unlock()
			own := batches[b%hotlistParts]
			if err := cl.c.Add(cl.next, own[(b/hotlistParts)%int64(len(own))]); err != nil {
				return err
			}
			cl.next++
			if cl.c.Due() {
				return cl.c.Flush(ctx)
			}
			return nil
		}, nil
	})
}

// hotlistBatches encodes, for each partition, perPart batches of 1000 events
// Zipf-distributed (s = 1.1) over the seed's 5M active items.
func hotlistBatches(perPart int) ([][][]byte, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 1, 5_000_000-1)
	now := time.Now()
	out := make([][][]byte, hotlistParts)
	pending := make([][]hotlist.Event, hotlistParts)
	for full := 0; full < hotlistParts; {
		e := hotlist.Event{Item: "item:" + strconv.FormatUint(zipf.Uint64(), 10), Kind: hotlist.Kind(1 + rng.IntN(4)), At: now}
		p := hotlist.PartitionOf(e.Item, hotlistParts)
		if len(out[p]) == perPart {
			continue
		}
		if pending[p] = append(pending[p], e); len(pending[p]) < 1000 {
			continue
		}
		data, err := hotlist.AppendBatch(nil, pending[p])
		if err != nil {
			return nil, err
		}
		out[p], pending[p] = append(out[p], data), pending[p][:0]
		if len(out[p]) == perPart {
			full++
		}
	}
	return out, nil
}

// hotlistReads measures list reads served from the published snapshot held
// in process (TopCached, top 50), all cores reading: more reads take more
// app nodes, not more Redis.
func hotlistReads() Measurement {
	m := onRedis("hotlist.read", "list reads (top 50, cached snapshot)", 0, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		l, err := hotlist.New(r.Client, hotlist.Config{Name: "bench-read", Namespace: ns, Partitions: hotlistParts})
		if err != nil {
			return nil, err
		}
		agg, _ := hotlist.NewAggregator(l, hotlist.AggregatorConfig{})
		batches, err := hotlistBatches(1)
		if err != nil {
			return nil, err
		}
		for p, own := range batches {
			c, err := agg.Claim(ctx, int32(p))
			if err != nil {
				return nil, err
			}
			c.Add(c.Resume(), own[0])
			if err := c.Release(ctx); err != nil {
				return nil, err
			}
		}
		if _, err := l.Publish(ctx); err != nil {
			return nil, err
		}
		return func() error {
			_, err := l.TopCached(ctx, 50)
			return err
		}, nil
	})
	m.Tier = TierApp
	return m
}
