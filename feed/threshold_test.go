package feed_test

import (
	"slices"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// The celebrity threshold derived from rates, with no override: the
// latency bound (PushRate × MaxFanoutDelay = 10 followers) for an author
// who posts rarely, the floor (5) once the author posts more often than a
// follower reads (ReadsPerDay × PullCostRatio = 1 a day). An author with 7
// followers is pushed for its first post, promoted by its second (still
// pushed until every process knows), and pulled after that; its followers'
// timelines hold every post either way.
func TestThresholdFromRates(t *testing.T) {
	f := newFixture(t, testenv.NewRedis(t), feed.Config{PushRate: 10, MaxFanoutDelay: time.Second, ReadsPerDay: 1, PullCostRatio: 1, PullFloor: 5})
	for perDay, want := range map[float64]int64{0: 10, 1: 10, 2: 5, 100: 5} {
		if got := f.s.Threshold(perDay); got != want {
			t.Errorf("Threshold(%v posts/day) = %d, want %d", perDay, got, want)
		}
	}
	readers := []string{"a", "b", "c", "d", "e", "f", "g"}
	for _, r := range readers {
		f.follow(r, "star")
		f.timeline(r, 10)
	}
	first := f.post("star", "1") // 1 post a day: threshold 10 > 7 followers
	if n := f.fanout(); n == 0 {
		t.Fatal("the first post was not pushed")
	}
	second := f.post("star", "2") // 2 a day: threshold 5 ≤ 7, promoted
	if n := f.fanout(); n == 0 {
		t.Fatal("the promoting post was not pushed (other processes may not know yet)")
	}
	f.clk.Add(10 * time.Millisecond) // past 2 × RegistryRefresh: every process knows
	third := f.post("star", "3")
	if n := f.fanout(); n != 0 {
		t.Fatalf("a celebrity's post was pushed in %d chunks, want pulled", n)
	}
	for _, r := range readers {
		if got, want := f.timeline(r, 10), []int64{third.ID, second.ID, first.ID}; !slices.Equal(got, want) {
			t.Errorf("timeline of %s: %v, want %v", r, got, want)
		}
	}
	quiet := newFixture(t, testenv.NewRedis(t), feed.Config{PushRate: 10, MaxFanoutDelay: time.Second, ReadsPerDay: 1, PullCostRatio: 1, PullFloor: 5})
	for _, r := range readers[:4] {
		quiet.follow(r, "local")
		quiet.timeline(r, 10)
	}
	for i := range 3 { // posting often, but 4 followers stay under the floor
		quiet.post("local", string(rune('a'+i)))
		quiet.clk.Add(10 * time.Millisecond)
		if n := quiet.fanout(); n == 0 {
			t.Fatalf("post %d of a small author was not pushed", i)
		}
	}
}
