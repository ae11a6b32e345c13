package feed_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
)

// TestMetricsAndSpans: a scripted run read with the SDK's manual reader
// and an in-memory span exporter; every count is exact, the post lookups
// by cache layer included.
func TestMetricsAndSpans(t *testing.T) {
	reader, mp, spans, tp := obstest.NewSDK()
	f := newFixture(t, testenv.NewRedis(t), feed.Config{MeterProvider: mp, TracerProvider: tp})

	f.follow("bob", "alice")   // follow 1
	f.follow("carol", "alice") // follow 2
	if err := f.s.Follow(f.ctx, "bob", "bob"); !errors.Is(err, feed.ErrInvalid) {
		t.Fatalf("following oneself: %v", err)
	}
	f.timeline("bob", 10) // timeline 1: opens bob's inbox (empty, nothing hydrated)
	if n, err := f.s.Activate(f.ctx, "carol", "bob"); err != nil || n != 1 {
		t.Fatalf("Activate: %d, %v", n, err)
	}
	if _, err := f.s.Activate(f.ctx, ""); !errors.Is(err, feed.ErrInvalid) {
		t.Fatalf("activating a bad name: %v", err)
	}
	p1 := f.post("alice", "one")
	p2 := f.post("alice", "two")
	if _, err := f.s.Publish(f.ctx, feed.PublishRequest{Author: "alice", RequestID: "bad", Body: ""}); !errors.Is(err, feed.ErrInvalid) {
		t.Fatalf("an empty body: %v", err)
	}
	f.clk.Add(1500 * time.Millisecond) // the chunks are pushed 1.5 s and 1.501 s after their posts
	if n := f.fanout(); n != 2 {       // relay_fanout 1, handle_chunk 2 (one chunk per post)
		t.Fatalf("%d chunks, want 2", n)
	}
	if err := f.s.HandleChunk(f.ctx, nil, []byte(`{"v":2}`)); !errors.Is(err, outbox.ErrPoison) {
		t.Fatalf("a malformed chunk: %v", err)
	}
	// The two pushes hydrated p1 and p2: Publish cached them in Redis, so
	// local misses and Redis hits, then the local cache holds them.
	if got := f.timeline("bob", 10); len(got) != 2 { // timeline 2
		t.Fatalf("bob sees %v, want 2 posts", got)
	}
	if _, err := f.s.Post(f.ctx, p1.ID+1<<40); !errors.Is(err, feed.ErrNotFound) { // an id no post has
		t.Fatalf("a missing post: %v", err)
	}
	if err := f.s.Delete(f.ctx, "alice", p2.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Delete(f.ctx, "bob", p1.ID); !errors.Is(err, feed.ErrNotFound) {
		t.Fatalf("deleting another's post: %v", err)
	}
	if page, err := f.s.AuthorPosts(f.ctx, "alice", "", 10); err != nil || len(page.Posts) != 1 { // hydrates p1
		t.Fatalf("alice's posts: %v, %v", page.Posts, err)
	}
	if _, err := f.s.AuthorPosts(f.ctx, "alice", "", 0); !errors.Is(err, feed.ErrInvalid) {
		t.Fatalf("a page of 0: %v", err)
	}
	for _, err := range []error{f.s.Mute(f.ctx, "bob", "alice"), f.s.Unmute(f.ctx, "bob", "alice"), f.s.Unblock(f.ctx, "bob", "alice"),
		f.s.SetMarker(f.ctx, "bob", p1.ID)} { // SetMarker hydrates p1
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := f.s.SetMarker(f.ctx, "bob", 0); !errors.Is(err, feed.ErrInvalid) {
		t.Fatalf("a marker at post 0: %v", err)
	}
	if m, err := f.s.Marker(f.ctx, "bob"); err != nil || m != p1.ID {
		t.Fatalf("marker %d, %v", m, err)
	}
	if n, err := f.s.UnreadSince(f.ctx, "bob"); err != nil || n != 1 { // p2, deleted but still in the inbox: an upper bound
		t.Fatalf("%d unread, %v", n, err)
	}

	var res metricdata.ResourceMetrics
	if err := reader.Collect(f.ctx, &res); err != nil {
		t.Fatal(err)
	}
	for _, sm := range res.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "casebook.feed.fanout.delay" {
				// p1 at +1 ms, p2 at +2 ms, pushed at +1502 ms
				if sum := h.DataPoints[0].Sum; math.Abs(sum-3.001) > 1e-9 {
					t.Errorf("fan-out delays sum to %v s, want 3.001 (1.501 + 1.5)", sum)
				}
			}
		}
	}
	got := obstest.Points(t, reader)
	// The lookups depend on what the local cache (ristretto, admitting
	// asynchronously) kept; their sum per layer does not: every lookup
	// is a hit or a miss, and a miss goes on to the next layer.
	layer := func(l string) (hit, miss float64) {
		return got["casebook.feed.post.lookups casebook.cache.layer="+l+",casebook.cache.result=hit"],
			got["casebook.feed.post.lookups casebook.cache.layer="+l+",casebook.cache.result=miss"]
	}
	lh, lm := layer("local")
	rh, rm := layer("redis")
	sh, sm := layer("sql")
	// hydrated: 2 pushes (p1, p2), the timeline's 2 posts, Post's 1 missing
	// id, AuthorPosts' and SetMarker's p1
	if lh+lm != 7 || rh+rm != lm || sh+sm != rm || sm != 1 || lm < 1 {
		t.Errorf("lookups local %v/%v, redis %v/%v, sql %v/%v (hit/miss): want 7 local, each miss looked up in the next layer, 1 SQL miss",
			lh, lm, rh, rm, sh, sm)
	}
	for _, k := range []string{"local", "redis", "sql"} {
		for _, r := range []string{"hit", "miss"} {
			delete(got, "casebook.feed.post.lookups casebook.cache.layer="+k+",casebook.cache.result="+r)
		}
	}
	want := map[string]float64{"casebook.feed.fanout.delay": 2}
	for _, c := range []struct {
		name, outcome, reason string
		n                     float64
	}{
		{"follow", "ok", "", 2}, {"follow", "refused", "invalid", 1},
		{"timeline", "ok", "", 2},
		{"publish", "ok", "", 2}, {"publish", "refused", "invalid", 1},
		{"relay_fanout", "ok", "", 1},
		{"handle_chunk", "ok", "", 2}, {"handle_chunk", "refused", "poison", 1},
		{"post", "refused", "not_found", 1},
		{"delete", "ok", "", 1}, {"delete", "refused", "not_found", 1},
		{"author_posts", "ok", "", 1}, {"author_posts", "refused", "invalid", 1},
		{"mute", "ok", "", 1}, {"unmute", "ok", "", 1}, {"unblock", "ok", "", 1},
		{"set_marker", "ok", "", 1}, {"set_marker", "refused", "invalid", 1},
		{"marker", "ok", "", 1}, {"unread_since", "ok", "", 1},
		{"activate", "ok", "", 1}, {"activate", "refused", "invalid", 1},
	} {
		obstest.AddOp(want, "feed", c.name, c.outcome, c.reason, c.n)
	}
	obstest.Expect(t, got, want)

	wantSpans := map[string]int{"feed.follow": 3, "feed.timeline": 2, "feed.publish": 3, "feed.relay_fanout": 1,
		"feed.handle_chunk": 3, "feed.post": 1, "feed.delete": 2,
		"feed.author_posts": 2, "feed.mute": 1, "feed.unmute": 1, "feed.unblock": 1, "feed.set_marker": 2,
		"feed.marker": 1, "feed.unread_since": 1, "feed.activate": 2}
	obstest.ExpectSpans(t, spans, wantSpans)
}
