package feed_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// TestPoisonChunksDoNotBlock: malformed fan-out chunks between good ones on
// one partition are skipped with a count by a real consumer group, and the
// chunks behind them reach the inboxes. So are well-formed chunks that
// contradict their post (its score or author, or no such post): the score
// comes from the post, not from the message.
func TestPoisonChunksDoNotBlock(t *testing.T) {
	f := newFixture(t, testenv.NewRedis(t), feed.Config{ChunkSize: 2})
	readers := []string{"a", "b", "c"}
	for _, r := range readers {
		f.follow(r, "star")
		f.timeline(r, 10) // active: fan-out pushes to them
	}
	chunks := &testenv.Published{}
	first := f.post("star", "first")
	if _, err := f.s.RelayFanout(f.ctx, chunks, "chunks", 100); err != nil {
		t.Fatal(err)
	}
	second := f.post("star", "second")
	if _, err := f.s.RelayFanout(f.ctx, chunks, "chunks", 100); err != nil {
		t.Fatal(err)
	}
	if len(chunks.Msgs) != 4 {
		t.Fatalf("%d chunks, want 2 per post (3 readers, chunks of 2)", len(chunks.Msgs))
	}
	poison := []string{
		`not json`,
		`{"v":2,"post":1,"author":"star","score":1,"followers":["a"]}`,
		`{"v":1,"post":1,"author":"star","score":1,"followers":[]}`,
		`{"v":1,"post":1,"author":"star","score":1,"followers":["a"],"x":1}`,
		`{"v":1,"post":1,"author":"star","score":1,"followers":["a"]} {}`,
		`{"v":1,"post":1,"author":"star","score":1,"followers":["a"]}]`,
		`{"v":1,"post":-1,"author":"star","score":1,"followers":["a"]}`,
		`null`,
		`{}`,
		`{"v":1,"post":1,"post":2,"author":"star","score":1,"followers":["a"]}`,
		`{"v":1,"Post":1,"author":"star","score":1,"followers":["a"]}`,
		// Well formed, but not what was published: the first post at a
		// score above the second's (it would jump ahead of it), by
		// another author, and a post that does not exist.
		fmt.Sprintf(`{"v":1,"post":%d,"author":"star","score":%d,"followers":["a","b","c"]}`, first.ID, second.Score+1000),
		fmt.Sprintf(`{"v":1,"post":%d,"author":"mallory","score":%d,"followers":["a","b","c"]}`, first.ID, first.Score),
		fmt.Sprintf(`{"v":1,"post":%d,"author":"star","score":%d,"followers":["a","b","c"]}`, second.ID+1, second.Score),
	}
	var values [][]byte
	for i, m := range chunks.Msgs {
		if i == 2 { // the first post's chunks, the poison, the second's
			for _, p := range poison {
				values = append(values, []byte(p))
			}
		}
		values = append(values, m.Value)
	}
	c, bad := testenv.ConsumeInOrder(t, values, f.s.HandleChunk, feed.ErrBadMessage)
	if c.Poisoned() != int64(len(poison)) || bad != len(poison) || c.Handled() != 4 {
		t.Fatalf("poisoned %d (%d ErrBadMessage), handled %d; want %d poisoned, 4 handled", c.Poisoned(), bad, c.Handled(), len(poison))
	}
	for _, r := range readers {
		if got, want := f.timeline(r, 10), []int64{second.ID, first.ID}; !slices.Equal(got, want) {
			t.Errorf("timeline of %s: %v, want %v", r, got, want)
		}
	}
}

// A miss cached before a post existed (a read of a guessed id, or a forged
// chunk for it) does not make the post's real chunks poison: Push asks SQL
// before it calls a post missing.
func TestCachedMissDoesNotPoisonARealPost(t *testing.T) {
	f := newFixture(t, testenv.NewRedis(t), feed.Config{})
	f.follow("reader", "star")
	f.timeline("reader", 10)
	p := f.post("star", "hello")
	if err := f.r.Client.Set(f.ctx, f.s.PostKey(p.ID), "-", time.Minute).Err(); err != nil { // the miss, as a reader cached it
		t.Fatal(err)
	}
	if n := f.fanout(); n != 1 {
		t.Fatalf("%d chunks, want 1", n)
	}
	f.r.Client.Del(f.ctx, f.s.PostKey(p.ID)) // the negative entry expires
	if got := f.timeline("reader", 10); !slices.Equal(got, []int64{p.ID}) {
		t.Fatalf("timeline %v, want [%d]", got, p.ID)
	}
}
