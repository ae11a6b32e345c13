package feed_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// authorPosts reads author's whole profile in pages of size.
func (f *fixture) authorPosts(author string, size int) []int64 {
	f.t.Helper()
	var ids []int64
	cursor := ""
	for range 1000 {
		p, err := f.s.AuthorPosts(f.ctx, author, cursor, size)
		if err != nil {
			f.t.Fatalf("posts of %s: %v", author, err)
		}
		for _, post := range p.Posts {
			if post.Author != author || post.Deleted {
				f.t.Fatalf("posts of %s show %+v", author, post)
			}
			ids = append(ids, post.ID)
		}
		if p.Next == "" {
			return ids
		}
		cursor = p.Next
	}
	f.t.Fatal("profile does not end")
	return nil
}

// newerThan counts the model timeline's posts before the marker post id
// (all without one).
func newerThan(ids []int64, marker int64) int64 {
	if i := slices.Index(ids, marker); i >= 0 {
		return int64(i)
	}
	return int64(len(ids))
}

// TestFiltersMatchModel: random follows, unfollows, blocks, unblocks,
// mutes, unmutes, posts and deletes, on one Redis and on the cluster, with
// pushed and pulled authors (u0 and u1 start as celebrities; others may be
// promoted on the way). After every step batch every timeline and profile
// equals the model's, and UnreadSince bounds the model's unread count from
// above.
func TestFiltersMatchModel(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		f := newFixture(t, r, feed.Config{CelebrityThreshold: 6})
		m := newModel()
		rng := rand.New(rand.NewPCG(27, 4))
		users := make([]string, 10)
		for i := range users {
			users[i] = "u" + strconv.Itoa(i)
		}
		for _, u := range users[2:] {
			for _, c := range users[:2] {
				f.follow(u, c)
				m.follow(u, c)
			}
		}
		for _, u := range users {
			f.timeline(u, 5) // active: pushed to
		}
		pick := func() (string, string) {
			a, b := users[rng.IntN(len(users))], users[rng.IntN(len(users))]
			for a == b {
				b = users[rng.IntN(len(users))]
			}
			return a, b
		}
		var live []feed.Post
		for step := range 240 {
			a, b := pick()
			var err error
			op := rng.IntN(10)
			switch op {
			case 0, 1:
				err = f.s.Follow(f.ctx, a, b)
				if ok := m.tryFollow(a, b); ok != (err == nil) && (ok || !errors.Is(err, feed.ErrBlocked)) {
					t.Fatalf("step %d: %s follows %s: %v, model allows: %v", step, a, b, err, ok)
				}
				err = nil
			case 2:
				err = f.s.Unfollow(f.ctx, a, b)
				set(m.follows, a, b, false)
			case 3:
				err = f.s.Block(f.ctx, a, b)
				m.block(a, b)
			case 4:
				err = f.s.Unblock(f.ctx, a, b)
				set(m.blocks, a, b, false)
			case 5:
				err = f.s.Mute(f.ctx, a, b)
				set(m.mutes, a, b, true)
			case 6:
				err = f.s.Unmute(f.ctx, a, b)
				set(m.mutes, a, b, false)
			case 7:
				if len(live) > 0 {
					i := rng.IntN(len(live))
					err = f.s.Delete(f.ctx, live[i].Author, live[i].ID)
					m.deleted[live[i].ID] = true
					live = slices.Delete(live, i, i+1)
				}
			default:
				p := f.post(a, fmt.Sprintf("s%d", step))
				m.posts = append(m.posts, p)
				live = append(live, p)
			}
			if err != nil {
				t.Fatalf("step %d (op %d, %s, %s): %v", step, op, a, b, err)
			}
			if step%40 != 39 {
				continue
			}
			f.fanout()
			for _, u := range users {
				if got, want := f.timeline(u, 4), m.timeline(u); !slices.Equal(got, want) {
					t.Fatalf("step %d: timeline of %s:\n got %v\nwant %v", step, u, got, want)
				}
				if got, want := f.authorPosts(u, 3), m.authorPosts(u); !slices.Equal(got, want) {
					t.Fatalf("step %d: posts of %s:\n got %v\nwant %v", step, u, got, want)
				}
				want := m.timeline(u)
				if len(want) > 2 && rng.IntN(2) == 0 {
					if err := f.s.SetMarker(f.ctx, u, want[2]); err != nil {
						t.Fatal(err)
					}
				}
				marker, err := f.s.Marker(f.ctx, u)
				if err != nil {
					t.Fatal(err)
				}
				if n, err := f.s.UnreadSince(f.ctx, u); err != nil || n < newerThan(want, marker) {
					t.Fatalf("step %d: %s has %d unread (%v), the model at least %d", step, u, n, err, newerThan(want, marker))
				}
			}
		}
	})
}

// TestAuthorPostsPastOutbox: a profile longer than the outbox pages through
// the outbox into SQL without a gap or a repeat, deletes hidden, cursors
// stable while the author posts again; a forged or foreign cursor is
// ErrCursor.
func TestAuthorPostsPastOutbox(t *testing.T) {
	key := []byte("sixteen+ byte deployment secret")
	f := newFixture(t, testenv.NewRedis(t), feed.Config{OutboxCap: 5, CursorKey: key})
	m := newModel()
	for i := range 23 {
		m.posts = append(m.posts, f.post("alice", "a"+strconv.Itoa(i)))
	}
	for _, i := range []int{0, 3, 9, 20, 22} { // in the outbox and past it
		if err := f.s.Delete(f.ctx, "alice", m.posts[i].ID); err != nil {
			t.Fatal(err)
		}
		m.deleted[m.posts[i].ID] = true
	}
	want := m.authorPosts("alice")
	for _, size := range []int{1, 3, 4, 7, 100} {
		if got := f.authorPosts("alice", size); !slices.Equal(got, want) {
			t.Fatalf("pages of %d:\n got %v\nwant %v", size, got, want)
		}
	}
	var got []int64
	var cursors []string
	for cursor, i := "", 0; ; i++ {
		p, err := f.s.AuthorPosts(f.ctx, "alice", cursor, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, post := range p.Posts {
			got = append(got, post.ID)
		}
		f.post("alice", "new"+strconv.Itoa(i)) // newer than every page
		if p.Next == "" {
			break
		}
		cursor = p.Next
		cursors = append(cursors, cursor)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged while posting:\n got %v\nwant %v", got, want)
	}
	f.follow("bob", "alice")
	tl, err := f.s.Timeline(f.ctx, "bob", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{cursors[0] + "A", cursors[0][:len(cursors[0])-2], tl.Next, feed.EncodeCursor(nil, "alice", 1<<40, 1)} {
		if _, err := f.s.AuthorPosts(f.ctx, "alice", c, 4); !errors.Is(err, feed.ErrCursor) {
			t.Errorf("cursor %q: %v, want ErrCursor", c, err)
		}
	}
	if _, err := f.s.AuthorPosts(f.ctx, "bob", cursors[0], 4); !errors.Is(err, feed.ErrCursor) {
		t.Errorf("alice's cursor on bob's page: %v, want ErrCursor", err)
	}
	if got := f.authorPosts("nobody", 10); len(got) != 0 {
		t.Fatalf("a user who never posted shows %v", got)
	}
}

// TestMuteUnblockIdempotent: each call made twice changes what one call
// does, no more; mute of an account not followed takes effect on a later
// follow; a pulled (celebrity) author is muted too.
func TestMuteUnblockIdempotent(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		f := newFixture(t, r, feed.Config{CelebrityThreshold: 2})
		do := func(calls ...error) {
			t.Helper()
			for _, err := range calls {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		f.follow("reader", "celeb")
		f.follow("other", "celeb") // 2 followers: pulled
		f.timeline("reader", 10)
		f.post("celeb", "c0") // promotes celeb
		f.clk.Add(f.cfg.RegistryRefresh * 3)
		c1 := f.post("celeb", "c1")
		do(f.s.Mute(f.ctx, "reader", "alice"), f.s.Mute(f.ctx, "reader", "alice")) // not followed yet
		a1 := f.post("alice", "a1")
		f.follow("reader", "alice")
		f.fanout()
		if got := f.timeline("reader", 10); slices.Contains(got, a1.ID) || !slices.Contains(got, c1.ID) {
			t.Fatalf("after muting alice before following her: %v", got)
		}
		do(f.s.Mute(f.ctx, "reader", "celeb"), f.s.Mute(f.ctx, "reader", "celeb"))
		if got := f.timeline("reader", 10); len(got) != 0 {
			t.Fatalf("both muted, reader sees %v", got)
		}
		if fs, _ := f.s.Followees(f.ctx, "reader", "", 10); !slices.Equal(fs, []string{"alice", "celeb"}) {
			t.Fatalf("muting changed the follows: %v", fs)
		}
		do(f.s.Unmute(f.ctx, "reader", "alice"), f.s.Unmute(f.ctx, "reader", "alice"), f.s.Unmute(f.ctx, "reader", "celeb"), f.s.Unmute(f.ctx, "reader", "nobody"))
		if got := f.timeline("reader", 10); !slices.Contains(got, a1.ID) || !slices.Contains(got, c1.ID) {
			t.Fatalf("after unmuting, reader sees %v", got)
		}

		do(f.s.Block(f.ctx, "reader", "alice"))
		do(f.s.Unblock(f.ctx, "reader", "alice"), f.s.Unblock(f.ctx, "reader", "alice"), f.s.Unblock(f.ctx, "reader", "nobody"))
		if got := f.timeline("reader", 10); slices.Contains(got, a1.ID) {
			t.Fatalf("unblock restored the follow: %v", got)
		}
		f.follow("reader", "alice")
		f.follow("alice", "reader")
		if got := f.timeline("reader", 10); !slices.Contains(got, a1.ID) {
			t.Fatalf("refollowed after unblock, reader sees %v", got)
		}
		// One side's unblock leaves the other side's block standing.
		do(f.s.Block(f.ctx, "reader", "alice"), f.s.Block(f.ctx, "alice", "reader"), f.s.Unblock(f.ctx, "reader", "alice"))
		if err := f.s.Follow(f.ctx, "reader", "alice"); !errors.Is(err, feed.ErrBlocked) {
			t.Fatalf("alice's block stands, follow: %v", err)
		}
	})
}

// TestFilterBadInput: bad input is ErrInvalid or ErrCursor and changes
// nothing.
func TestFilterBadInput(t *testing.T) {
	f := newFixture(t, testenv.NewRedis(t), feed.Config{})
	f.follow("reader", "alice")
	p := f.post("alice", "a")
	f.fanout()
	before := f.timeline("reader", 10)
	if err := f.s.SetMarker(f.ctx, "reader", p.ID); err != nil {
		t.Fatal(err)
	}
	checks := map[string]error{
		"mute self":         f.s.Mute(f.ctx, "reader", "reader"),
		"mute empty user":   f.s.Mute(f.ctx, "", "alice"),
		"mute empty author": f.s.Mute(f.ctx, "reader", ""),
		"mute marker id":    f.s.Mute(f.ctx, "reader", "~"),
		"unmute self":       f.s.Unmute(f.ctx, "alice", "alice"),
		"unblock self":      f.s.Unblock(f.ctx, "reader", "reader"),
		"unblock space id":  f.s.Unblock(f.ctx, "a b", "reader"),
		"marker post 0":     f.s.SetMarker(f.ctx, "reader", 0),
		"marker empty user": f.s.SetMarker(f.ctx, "", p.ID),
	}
	_, checks["posts n 0"] = f.s.AuthorPosts(f.ctx, "alice", "", 0)
	_, checks["posts n -1"] = f.s.AuthorPosts(f.ctx, "alice", "", -1)
	_, checks["posts n 101"] = f.s.AuthorPosts(f.ctx, "alice", "", feed.MaxPage+1)
	_, checks["posts empty author"] = f.s.AuthorPosts(f.ctx, "", "", 10)
	_, checks["marker of empty"] = f.s.Marker(f.ctx, "")
	_, checks["unread of empty"] = f.s.UnreadSince(f.ctx, "")
	for name, err := range checks {
		if !errors.Is(err, feed.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	for _, c := range []string{"x", "AAAA", "!!!!", string(make([]byte, 23))} {
		if _, err := f.s.AuthorPosts(f.ctx, "alice", c, 10); !errors.Is(err, feed.ErrCursor) {
			t.Errorf("cursor %q: %v, want ErrCursor", c, err)
		}
	}
	if err := f.s.SetMarker(f.ctx, "reader", p.ID+1<<40); !errors.Is(err, feed.ErrNotFound) {
		t.Errorf("marker at a post that does not exist: %v", err)
	}
	if got := f.timeline("reader", 10); !slices.Equal(got, before) {
		t.Fatalf("bad input changed the timeline: %v, was %v", got, before)
	}
	if m, _ := f.s.Marker(f.ctx, "reader"); m != p.ID {
		t.Fatalf("bad input moved the marker to %d, was %d", m, p.ID)
	}
	if fs, _ := f.s.Followees(f.ctx, "reader", "", 10); !slices.Equal(fs, []string{"alice"}) {
		t.Fatalf("bad input changed the follows: %v", fs)
	}
}

// TestUnreadSince: exact where nothing is deleted, muted or both pushed and
// pulled, over pushed and pulled posts; the marker only moves forward.
func TestUnreadSince(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		f := newFixture(t, r, feed.Config{CelebrityThreshold: 2})
		m := newModel()
		for _, u := range []string{"reader", "other"} {
			f.follow(u, "celeb")
			m.follow(u, "celeb")
		}
		f.follow("reader", "alice")
		m.follow("reader", "alice")
		if n, err := f.s.UnreadSince(f.ctx, "reader"); err != nil || n != 0 {
			t.Fatalf("nothing posted, %d unread: %v", n, err)
		}
		m.posts = append(m.posts, f.post("celeb", "promote")) // promotes; this one is pushed and pulled
		f.clk.Add(f.cfg.RegistryRefresh * 3)
		for i := range 6 {
			m.posts = append(m.posts, f.post("alice", "a"+strconv.Itoa(i)), f.post("celeb", "c"+strconv.Itoa(i)))
		}
		f.fanout()
		want := m.timeline("reader")
		count := func() int64 {
			t.Helper()
			n, err := f.s.UnreadSince(f.ctx, "reader")
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		// No marker: every entry, the promoting post twice (an upper bound).
		if n := count(); n != int64(len(want))+1 {
			t.Fatalf("no marker: %d unread, want %d", n, len(want)+1)
		}
		for _, i := range []int{7, 3, 0} {
			if err := f.s.SetMarker(f.ctx, "reader", want[i]); err != nil {
				t.Fatal(err)
			}
			if n := count(); n != int64(i) {
				t.Fatalf("marker at %d: %d unread, want %d", i, n, i)
			}
		}
		if err := f.s.SetMarker(f.ctx, "reader", want[5]); err != nil { // older: ignored
			t.Fatal(err)
		}
		if got, _ := f.s.Marker(f.ctx, "reader"); got != want[0] {
			t.Fatalf("marker moved back to %d", got)
		}
		// Mutes are not subtracted from pushed posts (an upper bound), and
		// a muted celebrity is not counted at all.
		f.post("alice", "late")
		f.post("celeb", "late")
		f.fanout()
		if n := count(); n != 2 {
			t.Fatalf("two new posts, %d unread", n)
		}
		if err := f.s.Mute(f.ctx, "reader", "alice"); err != nil {
			t.Fatal(err)
		}
		if err := f.s.Mute(f.ctx, "reader", "celeb"); err != nil {
			t.Fatal(err)
		}
		if n := count(); n != 1 {
			t.Fatalf("both muted: %d unread, want the pushed 1 (not subtracted)", n)
		}
	})
}
