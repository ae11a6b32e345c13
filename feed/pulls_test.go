package feed_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// A process keeps the head of each pulled celebrity's outbox in memory and
// checks it against the outbox's version at every first page: a post
// another app server publishes — even one whose clock is an hour behind, so
// that the post sorts below the head — and a post it deletes show in this
// process's next page at once, not after LocalTTL (an hour here).
func TestPulledHeadsFollowOtherProcesses(t *testing.T) {
	testenv.EachRedis(t, testPulledHeads)
}

func testPulledHeads(t *testing.T, r *testenv.Redis) {
	f := newFixture(t, r, feed.Config{LocalTTL: time.Hour})
	if err := f.s.Promote(f.ctx, "star"); err != nil {
		t.Fatal(err)
	}
	f.follow("reader", "star")
	var ids []int64
	for _, body := range []string{"one", "two", "three"} {
		ids = append(ids, f.post("star", body).ID)
	}
	page := func(s *feed.Service) []int64 { t.Helper(); return firstPage(t, s, "reader") }
	newest := slices.Clone(ids)
	slices.Reverse(newest)
	if got := page(f.s); !slices.Equal(got, newest) {
		t.Fatalf("first page %v, want %v", got, newest)
	}
	if got := page(f.s); !slices.Equal(got, newest) { // from the kept head
		t.Fatalf("second page %v, want %v", got, newest)
	}

	behind := testenv.NewClock(f.clk.Now().Add(-time.Hour))
	cfg := f.cfg
	cfg.Now = behind.Now
	other, err := feed.New(f.r.Client, f.dbs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	late, err := other.Publish(f.ctx, feed.PublishRequest{Author: "star", RequestID: "late", Body: "from a slow clock"})
	if err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(newest), late.ID)
	if got := page(f.s); !slices.Equal(got, want) {
		t.Fatalf("after another process published below the head: %v, want %v", got, want)
	}

	if err := other.Delete(f.ctx, "star", ids[1]); err != nil {
		t.Fatal(err)
	}
	want = []int64{ids[2], ids[0], late.ID}
	if got := page(f.s); !slices.Equal(got, want) {
		t.Fatalf("after another process deleted %d: %v, want %v", ids[1], got, want)
	}
}

// A process keeps a reader's followees and mutes in memory under a token
// that every change drops: a mute, an unmute, an unfollow, a follow and a
// block made through another app server change this process's next page at
// once, though the process keeps posts for an hour.
func TestKeptViewsFollowOtherProcesses(t *testing.T) {
	// otherReads: the other process reads right after each change, which
	// sets a fresh token, so this one's must be told from it, not only
	// found missing.
	for _, otherReads := range []bool{false, true} {
		t.Run(fmt.Sprintf("otherReads=%v", otherReads), func(t *testing.T) {
			testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) { testKeptViews(t, r, otherReads) })
		})
	}
}

func testKeptViews(t *testing.T, r *testenv.Redis, otherReads bool) {
	otherPages := 0
	if otherReads {
		otherPages = 2
	}
	f := newFixture(t, r, feed.Config{LocalTTL: time.Hour})
	other := f.twin(f.r.Client)
	if err := f.s.Promote(f.ctx, "star"); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"ann", "bob", "star"} {
		f.follow("reader", a)
	}
	posts := map[string]int64{}
	for _, a := range []string{"ann", "bob", "star", "cat"} {
		posts[a] = f.post(a, "by-"+a).ID
	}
	f.fanout()
	page := func() []int64 { t.Helper(); return firstPage(t, f.s, "reader") }
	of := func(authors ...string) []int64 {
		var ids []int64
		for _, a := range []string{"cat", "star", "bob", "ann"} { // newest first
			if slices.Contains(authors, a) {
				ids = append(ids, posts[a])
			}
		}
		return ids
	}
	check := func(what string, authors ...string) {
		t.Helper()
		for range otherPages { // a read that reloads a set sets no token, the next does
			if got, want := firstPage(t, other, "reader"), of(authors...); !slices.Equal(got, want) {
				t.Fatalf("%s: the other process's page %v, want %v (posts of %v)", what, got, want, authors)
			}
		}
		for range 2 { // the second read is served under the kept token
			if got, want := page(), of(authors...); !slices.Equal(got, want) {
				t.Fatalf("%s: page %v, want %v (posts of %v)", what, got, want, authors)
			}
		}
	}
	check("at first", "ann", "bob", "star")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(other.Mute(f.ctx, "reader", "bob"))
	check("bob muted elsewhere", "ann", "star")
	must(other.Mute(f.ctx, "reader", "star"))
	check("star muted elsewhere", "ann")
	must(other.Unmute(f.ctx, "reader", "bob"))
	must(other.Unmute(f.ctx, "reader", "star"))
	check("both unmuted elsewhere", "ann", "bob", "star")
	must(other.Unfollow(f.ctx, "reader", "ann"))
	check("ann unfollowed elsewhere", "bob", "star")
	must(other.Follow(f.ctx, "reader", "cat"))
	check("cat followed elsewhere", "bob", "star", "cat")
	must(other.Block(f.ctx, "star", "reader"))
	check("reader blocked by star elsewhere", "bob", "cat")
}

// firstPage is the ids of reader's first 20-post page.
func firstPage(t *testing.T, s *feed.Service, reader string) []int64 {
	t.Helper()
	p, err := s.Timeline(context.Background(), reader, "", 20)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, post := range p.Posts {
		got = append(got, post.ID)
	}
	return got
}
