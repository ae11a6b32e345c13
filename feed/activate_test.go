package feed_test

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// TestActivateMatchesRead: a reader made active by Activate is pushed to
// from then on and reads the timeline of a reader made active by reading —
// posts published before, one published before and fanned out after, and
// pushes arriving between Activate and the first read — while a reader
// already active keeps their inbox as it was.
func TestActivateMatchesRead(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		f := newFixture(t, r, feed.Config{ActivePeriod: time.Hour})
		if err := f.s.Promote(f.ctx, "celeb"); err != nil {
			t.Fatal(err)
		}
		m := newModel()
		readers := []string{"byread", "byactivate", "already"}
		for _, u := range readers {
			for _, a := range []string{"alice", "bob", "celeb"} {
				f.follow(u, a)
				m.follow(u, a)
			}
		}
		post := func(author, body string) { m.posts = append(m.posts, f.post(author, body)) }
		f.timeline("already", 10)
		post("alice", "a1")
		post("bob", "b1")
		post("celeb", "c1")
		f.fanout()
		before := f.timeline("already", 10)
		inbox, _ := f.r.Client.ZRangeWithScores(f.ctx, f.inbox("already"), 0, -1).Result()
		post("alice", "late") // published before Activate, fanned out after

		n, err := f.s.Activate(f.ctx, "byactivate", "already", "byactivate")
		if err != nil || n != 1 {
			t.Fatalf("Activate: %d, %v; want 1 (already is active, byactivate named twice)", n, err)
		}
		if again, _ := f.r.Client.ZRangeWithScores(f.ctx, f.inbox("already"), 0, -1).Result(); !slices.Equal(again, inbox) {
			t.Fatalf("Activate changed an active inbox: %v, was %v", again, inbox)
		}
		for _, k := range []string{f.inbox("byactivate"), f.pushed("byactivate")} {
			if ttl, _ := f.r.Client.PTTL(f.ctx, k).Result(); ttl <= 0 || ttl > time.Hour {
				t.Fatalf("%s TTL %v, want the active period", k, ttl)
			}
		}
		f.fanout()
		post("alice", "a2") // pushed between Activate and the first read
		post("celeb", "c2")
		f.fanout()
		if n, _ := f.r.Client.LLen(f.ctx, f.pushed("byactivate")).Result(); n != 3 {
			t.Fatalf("byactivate's pushed list holds %d entries, want the marker, late and a2", n)
		}
		if n, err := f.s.Activate(f.ctx, "byactivate"); err != nil || n != 0 {
			t.Fatalf("Activate again: %d, %v; want 0", n, err)
		}
		want := m.timeline("byread")
		for _, u := range readers {
			if got := f.timeline(u, 2); !slices.Equal(got, want) {
				t.Fatalf("%s reads %v, want %v", u, got, want)
			}
		}
		if got := want[len(want)-len(before):]; !slices.Equal(got, before) {
			t.Fatalf("already's older posts %v, were %v", got, before)
		}
		post("bob", "b2")
		f.fanout()
		want = m.timeline("byread")
		for _, u := range readers {
			if got := f.timeline(u, 3); !slices.Equal(got, want) {
				t.Fatalf("after a read, %s reads %v, want %v", u, got, want)
			}
		}
	})
}

// TestActivateBadInput: a bad name activates nobody; no name is no work.
func TestActivateBadInput(t *testing.T) {
	f := newFixture(t, testenv.NewRedis(t), feed.Config{})
	for _, bad := range [][]string{{"ok", ""}, {"ok", "~"}, {"a b", "ok"}} {
		if n, err := f.s.Activate(f.ctx, bad...); !errors.Is(err, feed.ErrInvalid) || n != 0 {
			t.Fatalf("Activate(%q): %d, %v; want ErrInvalid", bad, n, err)
		}
	}
	if n, _ := f.r.Client.Exists(f.ctx, f.inbox("ok"), f.pushed("ok")).Result(); n != 0 {
		t.Fatal("a refused Activate opened an inbox")
	}
	if n, err := f.s.Activate(f.ctx); err != nil || n != 0 {
		t.Fatalf("Activate(): %d, %v", n, err)
	}
}

// TestActivateWithoutLoadedScript: on a cluster whose nodes have not seen
// the script, Activate still opens every reader (each node that answers
// NOSCRIPT is sent the script).
func TestActivateWithoutLoadedScript(t *testing.T) {
	r := testenv.NewRedisCluster(t)
	f := newFixture(t, r, feed.Config{})
	if err := r.Client.ScriptFlush(f.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var readers []string
	for i := range 50 {
		readers = append(readers, "r"+strconv.Itoa(i))
	}
	if n, err := f.s.Activate(f.ctx, readers...); err != nil || n != len(readers) {
		t.Fatalf("Activate: %d, %v", n, err)
	}
	for _, u := range readers {
		if n, _ := r.Client.Exists(f.ctx, f.inbox(u), f.pushed(u)).Result(); n != 2 {
			t.Fatalf("%s has %d of its inbox and pushed list", u, n)
		}
	}
}

// TestActivateAfterLostPushedList: a built inbox whose pushed list a
// failover lost missed the pushes made meanwhile; Activate counts its
// reader as activated and the next read fills the inbox again.
func TestActivateAfterLostPushedList(t *testing.T) {
	f := newFixture(t, testenv.NewRedis(t), feed.Config{})
	f.follow("reader", "alice")
	f.timeline("reader", 10)
	f.r.Client.Del(f.ctx, f.pushed("reader"))
	p := f.post("alice", "lost")
	f.fanout()
	if n, err := f.s.Activate(f.ctx, "reader"); err != nil || n != 1 {
		t.Fatalf("Activate: %d, %v; want 1", n, err)
	}
	q := f.post("alice", "pushed")
	f.fanout()
	if got := f.timeline("reader", 10); !slices.Equal(got, []int64{q.ID, p.ID}) {
		t.Fatalf("reader sees %v, want [%d %d]", got, q.ID, p.ID)
	}
}

// TestActivateRacesReadsAndPushes: Activate, first reads and fan-out
// interleaved on the same readers miss no post and show none twice.
func TestActivateRacesReadsAndPushes(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		f := newFixture(t, r, feed.Config{})
		m := newModel()
		var readers []string
		for i := range 20 {
			u := "r" + strconv.Itoa(i)
			readers = append(readers, u)
			f.follow(u, "alice")
			m.follow(u, "alice")
		}
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		wg.Go(func() {
			for range 5 {
				if _, err := f.s.Activate(f.ctx, readers...); err != nil {
					errs <- err
					return
				}
			}
		})
		wg.Go(func() {
			for _, u := range readers {
				if _, err := f.s.Timeline(f.ctx, u, "", 10); err != nil {
					errs <- err
					return
				}
			}
		})
		for i := range 10 {
			m.posts = append(m.posts, f.post("alice", "p"+strconv.Itoa(i)))
			f.fanout()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		want := m.timeline("r0")
		for _, u := range readers {
			if got := f.timeline(u, 4); !slices.Equal(got, want) {
				t.Fatalf("%s reads %v, want %v", u, got, want)
			}
		}
	})
}

// TestActivateReplyLost: a pipeline whose reply is lost is sent again by
// go-redis; the readers end up active once, their timelines whole.
func TestActivateReplyLost(t *testing.T) {
	r, proxy := testenv.NewFaultyRedis(t)
	f := newFixture(t, r, feed.Config{})
	f.follow("r0", "alice")
	f.follow("r1", "alice")
	p := f.post("alice", "before")
	f.fanout()
	proxy.DropReplies(1)
	if _, err := f.s.Activate(f.ctx, "r0", "r1"); err != nil {
		t.Fatalf("Activate, reply lost and retried: %v", err)
	}
	if proxy.Cuts() != 1 {
		t.Fatalf("%d replies lost, want 1", proxy.Cuts())
	}
	if n, err := f.s.Activate(f.ctx, "r0", "r1"); err != nil || n != 0 {
		t.Fatalf("Activate again: %d, %v; want 0", n, err)
	}
	q := f.post("alice", "after")
	f.fanout()
	for _, u := range []string{"r0", "r1"} {
		if got := f.timeline(u, 10); !slices.Equal(got, []int64{q.ID, p.ID}) {
			t.Fatalf("%s reads %v, want [%d %d]", u, got, q.ID, p.ID)
		}
	}
}
