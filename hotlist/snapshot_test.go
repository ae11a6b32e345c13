package hotlist_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func reposts(f *fixture, item string, n int) []hotlist.Event {
	var out []hotlist.Event
	for range n {
		out = append(out, hotlist.Event{Item: item, Kind: hotlist.Repost, At: f.clk.Now()})
	}
	return out
}

func describe(entries []hotlist.Entry) string {
	s := ""
	for _, e := range entries {
		s += fmt.Sprintf("%d:%s", e.Rank, e.Item)
		switch {
		case e.Pinned:
			s += "(pin)"
		case e.New:
			s += "(new)"
		default:
			s += fmt.Sprintf("(%+d)", e.Change)
		}
		s += " "
	}
	return s
}

// Publish stores the top with rank changes; readers get it with the
// operators' pins and blocks applied at read, from a process cache that is
// at most CacheTTL old.
func TestSnapshotsRankChangesPinsAndBlocks(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	cfg := windowConfig(2)
	cfg.SnapshotSize = 5
	f := newFixture(t, r, cfg)
	if _, err := f.l.TopCached(ctx, 5); !errors.Is(err, hotlist.ErrNoSnapshot) {
		t.Fatalf("before any publish: %v", err)
	}
	for i, item := range []string{"a", "b", "c", "d", "e"} {
		f.send(reposts(f, item, 5-i)...)
	}
	f.flush()
	s1, err := f.l.Publish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(s1.Entries); got != "1:a(new) 2:b(new) 3:c(new) 4:d(new) 5:e(new) " || s1.Entries[0].Heat != 5 {
		t.Fatalf("first snapshot %s %+v", got, s1.Entries[0])
	}
	// The cache still holds "no snapshot" until CacheTTL passes.
	if _, err := f.l.TopCached(ctx, 5); !errors.Is(err, hotlist.ErrNoSnapshot) {
		t.Fatalf("cached read within CacheTTL: %v", err)
	}
	f.send(reposts(f, "e", 10)...)
	f.send(reposts(f, "f", 3)...)
	f.send(hotlist.Event{Item: "f", Kind: hotlist.Like, At: f.clk.Now()})
	f.flush()
	f.clk.Add(time.Minute)
	s2, err := f.l.Publish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(s2.Entries); got != "1:e(+4) 2:a(-1) 3:b(-1) 4:f(new) 5:c(-2) " {
		t.Fatalf("second snapshot %s", got)
	}
	if top, err := f.l.TopCached(ctx, 3); err != nil || describe(top) != "1:e(+4) 2:a(-1) 3:b(-1) " {
		t.Fatalf("cached top 3: %s, %v", describe(top), err)
	}

	f.l.Pin(ctx, "c", 1)
	f.l.Pin(ctx, "zzz", 2) // not on the list at all
	f.l.Block(ctx, "e")
	f.l.Pin(ctx, "e", 3) // a block beats a pin
	snap, err := f.l.Snapshot(ctx)
	if err != nil || describe(snap.Entries) != "1:c(pin) 2:zzz(pin) 3:a(-1) 4:b(-1) 5:f(new) " {
		t.Fatalf("with controls: %s, %v", describe(snap.Entries), err)
	}
	if top, _ := f.l.TopCached(ctx, 10); describe(top) != "1:e(+4) 2:a(-1) 3:b(-1) 4:f(new) 5:c(-2) " {
		t.Fatalf("the cache changed before CacheTTL: %s", describe(top))
	}
	f.clk.Add(time.Second)
	if top, _ := f.l.TopCached(ctx, 10); describe(top) != describe(snap.Entries) {
		t.Fatalf("cached with controls: %s", describe(top))
	}
	// Blocked items are left out of the next snapshot too, and ranks move up.
	f.l.Unpin(ctx, "c")
	f.l.Unpin(ctx, "zzz")
	s3, err := f.l.Publish(ctx)
	if err != nil || describe(s3.Entries) != "1:a(+1) 2:b(+1) 3:f(+1) 4:c(+1) 5:d(new) " {
		t.Fatalf("third snapshot %s, %v", describe(s3.Entries), err)
	}
	// Unblocked, e's pin applies at once; its organic place comes back with
	// the next publish.
	f.l.Unblock(ctx, "e")
	if snap, _ := f.l.Snapshot(ctx); describe(snap.Entries) != "1:a(+1) 2:b(+1) 3:e(pin) 4:f(+1) 5:c(+1) " {
		t.Fatalf("after unblocking e: %s", describe(snap.Entries))
	}
	for _, err := range []error{f.l.Pin(ctx, "x", 0), f.l.Pin(ctx, "x", 6), f.l.Pin(ctx, "", 1), f.l.Block(ctx, "")} {
		if err == nil {
			t.Error("a bad pin or block was accepted")
		}
	}
	// Pins at one position stand in name order, whichever was pinned first,
	// and a pin at the next position keeps its place after them.
	f.l.Unpin(ctx, "e")
	f.l.Pin(ctx, "zz", 2)
	f.l.Pin(ctx, "yy", 2)
	if snap, _ := f.l.Snapshot(ctx); describe(snap.Entries) != "1:a(+1) 2:yy(pin) 3:zz(pin) 4:b(+1) 5:f(+1) " {
		t.Fatalf("two pins at 2: %s", describe(snap.Entries))
	}
	f.l.Pin(ctx, "xx", 3)
	if snap, _ := f.l.Snapshot(ctx); describe(snap.Entries) != "1:a(+1) 2:yy(pin) 3:xx(pin) 4:zz(pin) 5:b(+1) " {
		t.Fatalf("two pins at 2 and one at 3: %s", describe(snap.Entries))
	}
}

// Concurrent publishers each store a snapshot only if it was compared with
// the latest one: one wins each race, the others get ErrPublishConflict.
func TestConcurrentPublishers(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	f := newFixture(t, r, windowConfig(4))
	f.send(reposts(f, "a", 2)...)
	f.flush()
	var (
		mu        sync.Mutex
		won, lost int
		wg        sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for range 10 {
				_, err := f.l.Publish(ctx)
				mu.Lock()
				switch {
				case err == nil:
					won++
				case errors.Is(err, hotlist.ErrPublishConflict):
					lost++
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won == 0 || won+lost != 80 {
		t.Fatalf("%d stored, %d conflicts", won, lost)
	}
	if snap, err := f.l.Snapshot(ctx); err != nil || describe(snap.Entries) != "1:a(+0) " {
		t.Fatalf("%s, %v", describe(snap.Entries), err)
	}
}

// RunPublisher publishes at once and then every Refresh; it stops with its
// context.
func TestRunPublisher(t *testing.T) {
	r := testenv.NewRedis(t)
	cfg := windowConfig(1)
	cfg.Refresh = 10 * time.Millisecond
	f := newFixture(t, r, cfg)
	f.send(reposts(f, "a", 1)...)
	f.flush()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.l.RunPublisher(ctx, func(err error) { t.Error(err) }); close(done) }()
	deadline := testenv.Now().Add(10 * time.Second)
	for {
		if snap, err := f.l.Snapshot(context.Background()); err == nil && len(snap.Entries) == 1 {
			break
		}
		if testenv.Now().After(deadline) {
			t.Fatal("no snapshot published")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
}
