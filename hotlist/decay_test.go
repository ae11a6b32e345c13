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
		before := metaField(r, 0, "epoch")
		f.clk.Add(2 * time.Second) // the next landmark is due
		wantTop := map[int][]hotlist.Entry{}
		for _, n := range []int{10, 500} {
			wantTop[n] = f.m.top(f.clk.Now(), n)
		}

		var (
			stop            atomic.Bool
			reads, midMove  atomic.Int64
			wg              sync.WaitGroup
			moving          atomic.Bool
			readersFinished = make(chan struct{})
		)
		for g := range 4 {
			wg.Go(func() {
				n := []int{10, 500}[g%2]
				for !stop.Load() {
					during := moving.Load()
					top, err := f.l.Top(ctx, n)
					if err != nil {
						t.Errorf("read during rescale: %v", err)
						return
					}
					if err := f.sameTop(top, n); err != nil {
						t.Errorf("read during rescale: %v", err)
						return
					}
					reads.Add(1)
					if during && moving.Load() {
						midMove.Add(1)
					}
				}
			})
		}
		go func() { wg.Wait(); close(readersFinished) }()

		flushes := 0
		for {
			f.flush()
			flushes++
			done := metaField(r, 0, "mig") == "" && metaField(r, 1, "mig") == ""
			moving.Store(!done)
			if done {
				break
			}
			time.Sleep(2 * time.Millisecond) // let readers in between chunks
		}
		stop.Store(true)
		<-readersFinished
		if t.Failed() {
			return
		}
		after := metaField(r, 0, "epoch")
		if mustAtoi(after) != mustAtoi(before)+1 || flushes < 10 || midMove.Load() == 0 {
			t.Fatalf("landmark %s → %s in %d flushes, %d reads (%d mid-move): expected a chunked move watched by readers", before, after, flushes, reads.Load(), midMove.Load())
		}
		old := r.Namespace + ":{hot:0}:heat:" + strconv.Itoa(mustAtoi(before)%2)
		if n := r.Client.Exists(ctx, old).Val(); n != 0 {
			t.Fatalf("the old landmark's set %s is still there", old)
		}
		for n, want := range wantTop {
			top, _ := f.l.Top(ctx, n)
			if err := f.sameTop(top, n); err != nil || len(top) != len(want) {
				t.Fatalf("after the move: %v", err)
			}
		}
	})
}
