package hotlist_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func randomEvent(rng *rand.Rand, items int, now time.Time, earliest, latest int) hotlist.Event {
	return hotlist.Event{
		Item: fmt.Sprintf("i%03d", rng.IntN(items)),
		Kind: hotlist.Kind(1 + rng.IntN(4)),
		At:   at(now, earliest+rng.IntN(latest-earliest+1)),
	}
}

// metaField reads a field of partition p's meta hash (list "hot").
func metaField(r *testenv.Redis, p int, field string) string {
	return r.Client.HGet(context.Background(), r.Namespace+":{hot:"+strconv.Itoa(p)+"}:meta", field).Val()
}

// Forward decay ranks exactly as recomputing every item's decayed heat now
// does — across landmark moves: the half-life is 1 s and landmarks are 4 s
// apart, so 60 rounds of random events (some late, some slightly early) and
// clock steps cross about ten of them, each copied 40 items per flush (a
// partition holds up to 200) while new events keep arriving.
func TestDecayMatchesNaiveModel(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		r.NeedsServer(t, "a landmark move copies a partition with ZSCAN across flushes and relies on Redis returning every member present throughout; miniredis' cursor is an offset into the members as they are at each call, so writes between calls make it skip some")
		ctx := context.Background()
		f := newFixture(t, r, hotlist.Config{Partitions: 2, HalfLife: time.Second, RescaleEvery: 4, RescaleChunk: 40})
		rng := rand.New(rand.NewPCG(5, 6))
		startEpoch, moves := "", 0
		for round := range 60 {
			var events []hotlist.Event
			for range 60 {
				events = append(events, randomEvent(rng, 400, f.clk.Now(), -3000, 500))
			}
			f.send(events...)
			f.flush()
			if round == 0 {
				startEpoch = metaField(r, 0, "epoch")
			}
			if metaField(r, 0, "mig") != "" {
				moves++
			}
			for _, n := range []int{1, 10, 400} {
				top, err := f.l.Top(ctx, n)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.sameTop(top, n); err != nil {
					t.Fatalf("round %d, top %d: %v", round, n, err)
				}
			}
			f.clk.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		}
		end := metaField(r, 0, "epoch")
		if end == "" || mustAtoi(end) < mustAtoi(startEpoch)+5 || moves < 5 {
			t.Fatalf("landmark went from %q to %q with %d rounds mid-move: the test did not cross landmarks", startEpoch, end, moves)
		}
	})
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// readWhile runs readers of Top(10) and Top(500), each compared with the
// model at the (frozen) clock, while work runs; work returns true when done.
// It returns how many reads overlapped work.
func readWhile(t *testing.T, f *fixture, work func() bool) int64 {
	t.Helper()
	ctx := context.Background()
	var (
		stop, busy  atomic.Bool
		reads, mids atomic.Int64
		wg          sync.WaitGroup
	)
	busy.Store(true)
	for g := range 4 {
		wg.Go(func() {
			n := []int{10, 500}[g%2]
			for !stop.Load() {
				during := busy.Load()
				top, err := f.l.Top(ctx, n)
				if err == nil {
					err = f.sameTop(top, n)
				}
				if err != nil {
					t.Errorf("concurrent read: %v", err)
					return
				}
				reads.Add(1)
				if during && busy.Load() {
					mids.Add(1)
				}
			}
		})
	}
	for !work() {
		time.Sleep(2 * time.Millisecond) // let readers in between chunks
	}
	busy.Store(false)
	for reads.Load() < 8 && !t.Failed() {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	return mids.Load()
}

// While partitions move to a new landmark chunk by chunk, concurrent readers
// always see the exact list: never an error, a gap or a half-moved set.
func TestRescaleUnderConcurrentReads(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		f := newFixture(t, r, hotlist.Config{Partitions: 2, HalfLife: time.Second, RescaleEvery: 2, RescaleChunk: 25})
		rng := rand.New(rand.NewPCG(7, 8))
		for range 10 {
			var events []hotlist.Event
			for range 300 {
				events = append(events, randomEvent(rng, 1500, f.clk.Now(), -900, 0))
			}
			f.send(events...)
		}
		f.flush()
		// Each partition's first flush, of hundreds of items, started it in a
		// WATCH transaction (nativeflush.go), on the cluster too.
		if n := hotlist.NativeFlushes(f.a); n != 2 {
			t.Fatalf("%d of the first 2 flushes were transactions", n)
		}
		before := metaField(r, 0, "epoch")
		f.clk.Add(2 * time.Second) // the next landmark is due
		flushes := 0
		mid := readWhile(t, f, func() bool {
			f.flush()
			flushes++
			return metaField(r, 0, "mig") == "" && metaField(r, 1, "mig") == ""
		})
		if t.Failed() {
			return
		}
		after := metaField(r, 0, "epoch")
		if mustAtoi(after) != mustAtoi(before)+1 || flushes < 10 || mid == 0 {
			t.Fatalf("landmark %s → %s in %d flushes, %d reads mid-move: expected a chunked move watched by readers", before, after, flushes, mid)
		}
		old := r.Namespace + ":{hot:0}:heat:" + strconv.Itoa(mustAtoi(before)%2)
		if n := r.Client.Exists(ctx, old).Val(); n != 0 {
			t.Fatalf("the old landmark's set %s is still there", old)
		}
		if err := f.sameTop(mustTop(t, f.l, 500), 500); err != nil {
			t.Fatalf("after the move: %v", err)
		}
	})
}

// A window's heat set for the coming slot is built chunk by chunk during the
// current slot's second half, and readers move to it at the slot's first
// instant — before any flush switches it — dropping the slot that left the
// ring; through all of it concurrent readers see the exact list.
func TestWindowBuildUnderConcurrentReads(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		f := newFixture(t, r, hotlist.Config{Partitions: 2, Model: hotlist.Window, Weights: dyadic(),
			Slots: 4, SlotLength: time.Minute, SlotWeights: []float64{1, 1, 0.5, 0.5}, RescaleChunk: 60})
		rng := rand.New(rand.NewPCG(13, 14))
		start := f.clk.Now() // a slot's first instant
		for range 10 {
			var events []hotlist.Event
			for range 300 {
				events = append(events, randomEvent(rng, 1500, start, -3*60_000, 59_999))
			}
			f.send(events...)
		}
		building := func() bool {
			return metaField(r, 0, "mig") != "" && metaField(r, 0, "ready") == "" || metaField(r, 1, "mig") != "" && metaField(r, 1, "ready") == ""
		}
		// The first flush applies the events and starts the current slot's
		// set from the slots: readers sum the slots meanwhile.
		f.flush()
		flushes := 0
		if mid := readWhile(t, f, func() bool { f.flush(); flushes++; return !building() }); t.Failed() || mid == 0 || flushes < 5 {
			t.Fatalf("first build: %d flushes, %d reads during it", flushes, mid)
		}
		f.flush() // switches to it
		if metaField(r, 0, "epoch") != strconv.FormatInt(start.UnixMilli()/60_000, 10) {
			t.Fatalf("epoch %s after the first build", metaField(r, 0, "epoch"))
		}
		// Second half of the slot: the next slot's set is built from this
		// one's items and the next slot's, while events keep coming.
		f.clk.Set(at(start, 40_000))
		f.send(randomEvent(rng, 1500, f.clk.Now(), -1000, 30_000))
		f.flush()
		if mid := readWhile(t, f, func() bool { f.flush(); return !building() && metaField(r, 0, "ready") == "1" }); t.Failed() || mid == 0 {
			t.Fatalf("next slot's build: %d reads during it", mid)
		}
		f.send(randomEvent(rng, 1500, f.clk.Now(), -1000, 30_000))
		f.flush() // ready sets stay current with new events
		// The next slot begins: its oldest slot leaves the ring; readers use
		// the ready set before and while a flush switches to it.
		f.clk.Set(at(start, 60_000))
		readWhile(t, f, func() bool { return true })
		readWhile(t, f, func() bool { f.flush(); return true })
		if t.Failed() {
			return
		}
		if metaField(r, 0, "epoch") != strconv.FormatInt(start.UnixMilli()/60_000+1, 10) {
			t.Fatalf("epoch %s after the slot began", metaField(r, 0, "epoch"))
		}
	})
}
