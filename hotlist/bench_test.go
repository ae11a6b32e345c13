package hotlist_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// BenchmarkFlush: items flushed into Redis per second — one flush of
// 5,000 items with the offset fence: a script call, or under Decay, once
// the claim holds a copy of its heat set, a WATCH transaction — against a raw
// go-redis pipeline of ZINCRBYs of the same items on the same server,
// interleaved in the same loop so that both see the same load ("of-raw" is
// the ratio). Only the Redis calls are timed, not the aggregation before the
// flush. A window flush writes each item twice — its slot, the record, and
// the window's heat set readers rank from — so it also gets a raw baseline
// of two ZINCRBYs per item ("of-raw-same-writes"); its clock is kept early
// in a slot, where no next slot's set is being built (which adds a third
// write per item for the slot's last minute).
func BenchmarkFlush(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	const items = 5000
	names := make([]string, items)
	for i := range names {
		names[i] = "item:" + strconv.Itoa(i*7919)
	}
	raw := func(writes int) time.Duration {
		start := testenv.Now()
		pipe := r.Client.Pipeline()
		for _, m := range names {
			for k := range writes {
				pipe.ZIncrBy(ctx, r.Namespace+":raw:"+strconv.Itoa(k), 1, m)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		return testenv.Since(start)
	}
	for _, model := range []hotlist.Model{hotlist.Decay, hotlist.Window} {
		b.Run(model.String(), func(b *testing.B) {
			now := testenv.Now().Truncate(5 * time.Minute).Add(time.Second)
			l, err := hotlist.New(r.Client, hotlist.Config{Name: "flush-" + model.String(), Namespace: r.Namespace, Partitions: 1, Model: model, Now: func() time.Time { return now }})
			if err != nil {
				b.Fatal(err)
			}
			a, _ := hotlist.NewAggregator(l, hotlist.AggregatorConfig{})
			claim, err := a.Claim(ctx, 0)
			if err != nil {
				b.Fatal(err)
			}
			events := make([]hotlist.Event, items)
			for i, m := range names {
				events[i] = hotlist.Event{Item: m, Kind: hotlist.Repost, At: now}
			}
			data, _ := hotlist.AppendBatch(nil, events)
			off := claim.Applied()
			for range 10 { // the window's heat set for the slot gets built
				off++
				claim.Add(off, data)
				if err := claim.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			var spent, rawSpent, rawSameSpent time.Duration
			for b.Loop() {
				rawSpent += raw(1)
				if model == hotlist.Window {
					rawSameSpent += raw(2)
				}
				off++
				if err := claim.Add(off, data); err != nil {
					b.Fatal(err)
				}
				start := testenv.Now()
				if err := claim.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				spent += testenv.Since(start)
			}
			rate := float64(b.N*items) / spent.Seconds()
			b.ReportMetric(rate, "items/s")
			b.ReportMetric(float64(b.N*items)/rawSpent.Seconds(), "raw-items/s")
			b.ReportMetric(rawSpent.Seconds()/spent.Seconds(), "of-raw")
			if model == hotlist.Window {
				b.ReportMetric(rawSameSpent.Seconds()/spent.Seconds(), "of-raw-same-writes")
			}
		})
	}
}

// populate makes a list of parts partitions and feeds it 3 events per item
// over the last 55 minutes (every slot of the default window):
// Zipf-distributed (s = 1.1) over parts×perPart items, or, with uniform, 1
// to 5 events for every item — no item hot in every slot, the threshold
// algorithm's worst case. Then, unless unbuilt, it flushes a few times more,
// as a running aggregator does, so that window heat sets are built.
func populate(b *testing.B, r *testenv.Redis, name string, model hotlist.Model, parts, perPart int, uniform, unbuilt bool) *hotlist.List {
	b.Helper()
	ctx := context.Background()
	cfg := hotlist.Config{Name: name, Namespace: r.Namespace, Partitions: parts, Model: model}
	if unbuilt {
		cfg.RescaleChunk = 1 // the first flush starts a build it cannot finish
	}
	l, err := hotlist.New(r.Client, cfg)
	if err != nil {
		b.Fatal(err)
	}
	a, _ := hotlist.NewAggregator(l, hotlist.AggregatorConfig{})
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(parts*perPart-1))
	event := func(item uint64) hotlist.Event {
		return hotlist.Event{Item: "item:" + strconv.FormatUint(item, 10), Kind: hotlist.Kind(1 + rng.IntN(4)), At: testenv.Now().Add(-time.Duration(rng.IntN(55*60_000)) * time.Millisecond)}
	}
	var events []hotlist.Event
	for i := range parts * perPart {
		if uniform {
			for range 1 + rng.IntN(5) {
				events = append(events, event(uint64(i)))
			}
		} else {
			for range 3 {
				events = append(events, event(zipf.Uint64()))
			}
		}
	}
	msgs, _ := hotlist.EncodeMessages("t", parts, 0, events)
	for _, m := range msgs {
		p := hotlist.PartitionOf(m.Key, parts)
		claim, err := a.Claim(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		claim.Add(claim.Resume(), m.Value)
		for range 20 {
			if err := claim.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			if unbuilt {
				break
			}
		}
	}
	return l
}

// BenchmarkTopCached: the reader's path, served from process memory.
func BenchmarkTopCached(b *testing.B) {
	ctx := context.Background()
	l := populate(b, testenv.NewRedis(b), "cached", hotlist.Decay, 8, 1000, false, false)
	if _, err := l.Publish(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if top, err := l.TopCached(ctx, 100); err != nil || len(top) != 100 {
				b.Fatal(top, err)
			}
		}
	})
}

// BenchmarkTop64: Top(100) computed live over 64 partitions on the Redis
// Cluster (spawned, or CASEBOOK_REDIS_CLUSTER), 192,000 Zipf events over
// 64,000 items, against as many pipelined ZREVRANGEs of the decay sets (the
// round trips with no script and no merge) in the same run. The
// window-unbuilt rows read windows whose heat sets the flushes have not
// built (aggregators stopped), so every partition sums its slots: with Zipf
// data, and with the threshold algorithm's worst case (uniform: no item hot
// in every slot, every slot read in full).
func BenchmarkTop64(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedisCluster(b)
	for _, c := range []struct {
		name             string
		model            hotlist.Model
		uniform, unbuilt bool
	}{
		{"decay", hotlist.Decay, false, false},
		{"window", hotlist.Window, false, false},
		{"window-unbuilt", hotlist.Window, false, true},
		{"window-unbuilt-uniform", hotlist.Window, true, true},
	} {
		l := populate(b, r, "top-"+c.name, c.model, 64, 1000, c.uniform, c.unbuilt)
		b.Run(c.name, func(b *testing.B) {
			testenv.Latencies(b, func() error {
				top, err := l.Top(ctx, 100)
				if err == nil && len(top) != 100 {
					err = fmt.Errorf("top has %d entries", len(top))
				}
				return err
			})
		})
	}
	b.Run("raw-pipelined-zrevrange", func(b *testing.B) {
		keys := make([]string, 64)
		for p := range keys {
			tag := "{top-decay:" + strconv.Itoa(p) + "}"
			epoch, _ := strconv.Atoi(r.Client.HGet(ctx, r.Namespace+":"+tag+":meta", "epoch").Val())
			keys[p] = r.Namespace + ":" + tag + ":heat:" + strconv.Itoa(epoch%2)
		}
		testenv.Latencies(b, func() error {
			pipe := r.Client.Pipeline()
			for _, k := range keys {
				pipe.ZRevRangeWithScores(ctx, k, 0, 2*100/64+4-1)
			}
			_, err := pipe.Exec(ctx)
			return err
		})
	})
}
