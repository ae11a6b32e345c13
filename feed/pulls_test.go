package feed_test

import (
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
	f := newFixture(t, testenv.NewRedis(t), feed.Config{LocalTTL: time.Hour})
	if err := f.s.Promote(f.ctx, "star"); err != nil {
		t.Fatal(err)
	}
	f.follow("reader", "star")
	var ids []int64
	for _, body := range []string{"one", "two", "three"} {
		ids = append(ids, f.post("star", body).ID)
	}
	page := func(s *feed.Service) []int64 {
		t.Helper()
		p, err := s.Timeline(f.ctx, "reader", "", 20)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, post := range p.Posts {
			got = append(got, post.ID)
		}
		return got
	}
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
