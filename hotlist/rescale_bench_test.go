package hotlist_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// BenchmarkRescaleChunk: how long one flush holds Redis while it moves a
// landmark — a partition of 20,000 items, RescaleChunk 1,000 (the
// default), the move spread over the flushes that follow the landmark
// falling due (the partition keeps its Keep = 10,000 hottest). Each op is
// one whole move; it reports the longest and the mean flush of the move
// (wall time on loopback: an upper bound of the script's time).
func BenchmarkRescaleChunk(b *testing.B) {
	r := testenv.NewRedis(b)
	f := newFixture(b, r, hotlist.Config{Partitions: 1, HalfLife: time.Second, RescaleEvery: 2, RescaleChunk: 1000})
	rng := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		var events []hotlist.Event
		for range 1000 {
			e := randomEvent(rng, 20_000, f.clk.Now(), -900, 0)
			events = append(events, e)
		}
		f.send(events...)
		f.flush()
	}
	timed := func() time.Duration {
		start := testenv.Now()
		f.flush()
		return testenv.Since(start)
	}
	var moving []time.Duration
	for b.Loop() {
		f.clk.Add(2 * time.Second) // the next landmark is due
		for range 100 {
			d := timed()
			if metaField(r, 0, "mig") == "" {
				break
			}
			moving = append(moving, d)
		}
	}
	if len(moving) == 0 {
		b.Fatal("no landmark move happened")
	}
	mean := func(ds []time.Duration) float64 {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return float64(sum.Microseconds()) / float64(len(ds)) / 1000
	}
	b.ReportMetric(float64(slices.Max(moving).Microseconds())/1000, "max-ms/chunk")
	b.ReportMetric(mean(moving), "mean-ms/chunk")
	b.ReportMetric(float64(len(moving))/float64(b.N), "chunks/move")
}
