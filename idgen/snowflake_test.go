package idgen_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func TestSnowflakeNodeRange(t *testing.T) {
	ctx := context.Background()
	for _, id := range []int64{-1, 1024} {
		if _, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: id}); !errors.Is(err, idgen.ErrNodeID) {
			t.Errorf("node %d: %v, want ErrNodeID", id, err)
		}
	}
	s, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 1023})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := s.Next(ctx)
	if idgen.SnowflakeNode(id) != 1023 {
		t.Fatalf("node of %d = %d", id, idgen.SnowflakeNode(id))
	}
	// wall clock: bwmarrin/snowflake stamps ids with time.Now, which no clock replaces
	if d := time.Since(idgen.SnowflakeTime(id)); d < 0 || d > time.Second {
		t.Fatalf("id time %v is %v from now", idgen.SnowflakeTime(id), d)
	}
}

// Many goroutines on two nodes: no id twice, ids of one goroutine increase.
func TestSnowflakeUniqueUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for node := range int64(2) {
		s, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: node})
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			wg.Go(func() {
				ids := make([]int64, 20000)
				for i := range ids {
					ids[i], _ = s.Next(ctx)
					if i > 0 && ids[i] <= ids[i-1] {
						t.Errorf("ids went down: %d then %d", ids[i-1], ids[i])
						return
					}
				}
				mu.Lock()
				defer mu.Unlock()
				for _, id := range ids {
					if seen[id] {
						t.Errorf("id %d issued twice", id)
						return
					}
					seen[id] = true
				}
			})
		}
	}
	wg.Wait()
	if len(seen) != 2*4*20000 {
		t.Fatalf("%d distinct ids, want %d", len(seen), 2*4*20000)
	}
}

// A restart whose clock is behind the stored reservation fails clearly when
// the gap is large, and waits it out when small — never repeating an id.
func TestSnowflakeRestartWithClockBehind(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	cp := idgen.NewRedisCheckpoint(r.Client, r.Namespace+":snowflake:node:7")

	first, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 7, Checkpoint: cp, Lease: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lastBefore, _ := first.Next(ctx)
	reserved, err := cp.Load(ctx)
	if err != nil || !reserved.After(idgen.SnowflakeTime(lastBefore)) {
		t.Fatalf("reservation %v does not cover issued id time %v (%v)", reserved, idgen.SnowflakeTime(lastBefore), err)
	}

	// The clock of the restarted process reads 10 s earlier: refuse.
	// wall clock: bwmarrin/snowflake stamps ids with time.Now, so the restart's clock is that one, 10 s back
	tenBack := func() time.Time { return time.Now().Add(-10 * time.Second) }
	_, err = idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 7, Checkpoint: cp, Lease: 200 * time.Millisecond, Now: tenBack})
	if !errors.Is(err, idgen.ErrClockBackwards) {
		t.Fatalf("restart 10 s back: %v, want ErrClockBackwards", err)
	}
	if again, _ := cp.Load(ctx); !again.Equal(reserved) {
		t.Fatalf("a refused restart changed the checkpoint: %v → %v", reserved, again)
	}

	// An immediate restart waits for the rest of the lease.
	start := testenv.Now()
	second, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 7, Checkpoint: cp, Lease: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := second.Next(ctx)
	if !idgen.SnowflakeTime(id).After(reserved) && !idgen.SnowflakeTime(id).Equal(reserved) {
		t.Fatalf("new id time %v is before the old reservation %v", idgen.SnowflakeTime(id), reserved)
	}
	if id <= lastBefore {
		t.Fatalf("id after restart %d ≤ id before %d", id, lastBefore)
	}
	if waited := testenv.Since(start); waited > time.Second {
		t.Fatalf("restart waited %v for a 200ms lease", waited)
	}
}

// Issuing ids for longer than a lease keeps extending the reservation ahead of
// every id issued.
func TestSnowflakeReservationKeepsAhead(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	cp := idgen.NewRedisCheckpoint(r.Client, r.Namespace+":snowflake:node:3")
	s, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 3, Checkpoint: cp, Lease: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	deadline := testenv.Now().Add(300 * time.Millisecond)
	for testenv.Now().Before(deadline) {
		id, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		reserved, _ := cp.Load(ctx)
		if idgen.SnowflakeTime(id).After(reserved) {
			t.Fatalf("id at %v issued beyond the saved reservation %v", idgen.SnowflakeTime(id), reserved)
		}
		time.Sleep(time.Millisecond)
	}
}

// hangingCheckpoint stores reservations in a real checkpoint until hang is
// set; then Save blocks until its context ends and reports how it ended.
type hangingCheckpoint struct {
	idgen.Checkpoint
	hang    atomic.Bool
	started chan struct{}
	ended   chan error
}

func (c *hangingCheckpoint) Save(ctx context.Context, t time.Time) error {
	if !c.hang.Load() {
		return c.Checkpoint.Save(ctx, t)
	}
	c.started <- struct{}{}
	<-ctx.Done()
	c.ended <- ctx.Err()
	return ctx.Err()
}

// Close cancels a background renewal of the reservation and returns only
// once it has ended; afterwards Next fails with ErrClosed.
func TestSnowflakeCloseStopsRenewal(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	cp := &hangingCheckpoint{Checkpoint: idgen.NewRedisCheckpoint(r.Client, r.Namespace+":snowflake:node:9"), started: make(chan struct{}, 1), ended: make(chan error, 1)}
	s, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 9, Checkpoint: cp, Lease: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cp.hang.Store(true)
	deadline := testenv.Now().Add(10 * time.Second)
	for len(cp.started) == 0 { // the renewal starts half-way through a lease
		if testenv.Now().After(deadline) {
			t.Fatal("no background renewal")
		}
		if _, err := s.Next(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	s.Close()
	select {
	case err := <-cp.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("renewal ended with %v, want context.Canceled", err)
		}
	default:
		t.Fatal("Close returned while the renewal was still running")
	}
	if _, err := s.Next(ctx); !errors.Is(err, idgen.ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
	s.Close()
}
