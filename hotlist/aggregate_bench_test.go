package hotlist

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/testenv"
)

// zipfBatches encodes events Zipf-distributed (s = 1.1) over 5M items — the
// seed's active items — as batches of 1000 per partition, at times within
// the last second of now.
func zipfBatches(b *testing.B, parts, perPart int, now time.Time) [][][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 1, 5_000_000-1)
	out := make([][][]byte, parts)
	pending := make([][]Event, parts)
	for {
		e := Event{Item: "item:" + strconv.FormatUint(zipf.Uint64(), 10), Kind: Kind(1 + rng.IntN(4)), At: now.Add(-time.Duration(rng.IntN(1000)) * time.Millisecond)}
		p := PartitionOf(e.Item, parts)
		if len(out[p]) == perPart {
			continue
		}
		pending[p] = append(pending[p], e)
		if len(pending[p]) == 1000 {
			data, err := AppendBatch(nil, pending[p])
			if err != nil {
				b.Fatal(err)
			}
			out[p], pending[p] = append(out[p], data), pending[p][:0]
			done := true
			for _, o := range out {
				done = done && len(o) == perPart
			}
			if done {
				return out
			}
		}
	}
}

// BenchmarkAggregate: decode, weigh and aggregate in memory, one claim per
// goroutine (one per core), each pending batch dropped at 10,000 items as a
// flush would recycle it. The baseline in the same run is decoding alone.
func BenchmarkAggregate(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: nothing here does I/O
	defer c.Close()
	now := testenv.Now()
	const parts = 8
	batches := zipfBatches(b, parts, 64, now)
	for _, name := range []string{"decode-only", "decay", "window"} {
		b.Run(name, func(b *testing.B) {
			model := Decay
			if name == "window" {
				model = Window
			}
			l, err := New(c, Config{Name: "bench", Partitions: parts, Model: model, Now: func() time.Time { return now }})
			if err != nil {
				b.Fatal(err)
			}
			a, _ := NewAggregator(l, AggregatorConfig{})
			var next atomic.Int32
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				p := int(next.Add(1)-1) % parts
				claim := &Claim{a: a, l: l, p: p, applied: -1, epoch: -1, pend: newBatch(), spare: newBatch(), last: now}
				var scratch []rawEvent
				off := int64(0)
				for pb.Next() {
					data := batches[p][off%int64(len(batches[p]))]
					if name == "decode-only" {
						if scratch, err = decodeBatch(data, scratch); err != nil {
							b.Error(err)
							return
						}
					} else if err := claim.Add(off, data); err != nil {
						b.Error(err)
						return
					}
					off++
					if claim.pend.entries >= 10_000 {
						claim.pend.reset()
					}
				}
			})
			b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
		})
	}
}
