package feed_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// newRT is the fixture of feed_test.go on a Redis of its own.
func newRT(t *testing.T, cfg feed.Config) *fixture {
	t.Helper()
	return newFixture(t, testenv.NewRedis(t), cfg)
}

func (f *fixture) must(err error, what string) {
	f.t.Helper()
	if err != nil {
		f.t.Fatalf("%s: %v", what, err)
	}
}

func rev(ps []feed.Post) []int64 {
	var ids []int64
	for i := len(ps) - 1; i >= 0; i-- {
		ids = append(ids, ps[i].ID)
	}
	return ids
}

// "Muting someone user does not follow is allowed and takes effect if user
// follows them later." / "Unmuting someone not muted is a no-op." /
// "Muting again is a no-op."
func TestRedTeamMuteThenFollow(t *testing.T) {
	for _, celeb := range []bool{false, true} {
		t.Run(fmt.Sprint("celebrity=", celeb), func(t *testing.T) {
			cfg := feed.Config{}
			if celeb {
				cfg.CelebrityThreshold = 1
			}
			f := newRT(t, cfg)
			f.timeline("alice", 10) // active
			f.must(f.s.Mute(f.ctx, "alice", "bob"), "mute")
			f.must(f.s.Mute(f.ctx, "alice", "bob"), "mute again")
			f.must(f.s.Follow(f.ctx, "alice", "bob"), "follow")
			f.must(f.s.Follow(f.ctx, "alice", "carol"), "follow")
			f.clk.Add(time.Second) // registry refresh, promotion settles
			var bobs []feed.Post
			for i := range 3 {
				bobs = append(bobs, f.post("bob", fmt.Sprint("b", i)))
			}
			c := f.post("carol", "c0")
			f.fanout()
			if got := f.timeline("alice", 2); !slices.Equal(got, []int64{c.ID}) {
				t.Errorf("muted-before-follow bob shows: timeline %v, want [%d]", got, c.ID)
			}
			f.must(f.s.Unmute(f.ctx, "alice", "carol"), "unmute of never-muted")
			f.must(f.s.Unmute(f.ctx, "alice", "nobody"), "unmute of never-muted, not followed")
			if got := f.timeline("alice", 2); !slices.Equal(got, []int64{c.ID}) {
				t.Errorf("after unmute of never-muted carol: %v, want [%d]", got, c.ID)
			}
			f.must(f.s.Unmute(f.ctx, "alice", "bob"), "unmute")
			want := append([]int64{c.ID}, rev(bobs)...)
			if got := f.timeline("alice", 2); !slices.Equal(got, want) {
				t.Errorf("after Unmute (muted twice, unmuted once): %v, want %v", got, want)
			}
			f.must(f.s.Unmute(f.ctx, "alice", "bob"), "unmute again")
			if got := f.timeline("alice", 2); !slices.Equal(got, want) {
				t.Errorf("after second Unmute: %v, want %v", got, want)
			}
			// Mute does not touch the follow, nor AuthorPosts
			f.must(f.s.Mute(f.ctx, "alice", "bob"), "mute")
			fs, err := f.s.Followees(f.ctx, "alice", "", 10)
			f.must(err, "followees")
			if !slices.Contains(fs, "bob") {
				t.Errorf("Mute removed the follow: followees %v", fs)
			}
			if got := f.authorPosts("bob", 2); !slices.Equal(got, rev(bobs)) {
				t.Errorf("AuthorPosts(bob) with a mute: %v, want %v", got, rev(bobs))
			}
		})
	}
}

// Block: "removes the follow both ways; neither can follow the other while
// the block stands." Unblock: "It does not restore the follows Block
// removed ... the unblocked author's posts show in blocker's Timeline again
// once blocker follows them ... a block blocked made of blocker stands."
func TestRedTeamBlockUnblockFollow(t *testing.T) {
	f := newRT(t, feed.Config{})
	f.timeline("alice", 10)
	f.timeline("bob", 10)
	f.must(f.s.Follow(f.ctx, "alice", "bob"), "follow")
	f.must(f.s.Follow(f.ctx, "bob", "alice"), "follow")
	b1 := f.post("bob", "b1")
	f.fanout()
	if got := f.timeline("alice", 10); !slices.Equal(got, []int64{b1.ID}) {
		t.Fatalf("before block: %v", got)
	}
	f.must(f.s.Block(f.ctx, "alice", "bob"), "block")
	f.must(f.s.Block(f.ctx, "alice", "bob"), "block again")
	if got := f.timeline("alice", 10); len(got) != 0 {
		t.Errorf("after block, alice's timeline %v", got)
	}
	for _, p := range [][2]string{{"alice", "bob"}, {"bob", "alice"}} {
		fs, err := f.s.Followees(f.ctx, p[0], "", 10)
		f.must(err, "followees")
		if len(fs) != 0 {
			t.Errorf("%s still follows %v after block", p[0], fs)
		}
		if err := f.s.Follow(f.ctx, p[0], p[1]); !errors.Is(err, feed.ErrBlocked) {
			t.Errorf("Follow(%s, %s) under block = %v, want ErrBlocked", p[0], p[1], err)
		}
	}
	if n, err := f.s.FollowerCount(f.ctx, "bob"); err != nil || n != 0 {
		t.Errorf("FollowerCount(bob) after block = %d, %v", n, err)
	}
	f.must(f.s.Unblock(f.ctx, "alice", "bob"), "unblock")
	f.must(f.s.Unblock(f.ctx, "alice", "bob"), "unblock again")
	f.must(f.s.Unblock(f.ctx, "alice", "zed"), "unblock never blocked")
	if fs, _ := f.s.Followees(f.ctx, "alice", "", 10); len(fs) != 0 {
		t.Errorf("Unblock restored follows: %v", fs)
	}
	if got := f.timeline("alice", 10); len(got) != 0 {
		t.Errorf("after unblock, before follow: %v", got)
	}
	f.must(f.s.Follow(f.ctx, "alice", "bob"), "follow after unblock")
	f.must(f.s.Follow(f.ctx, "bob", "alice"), "reverse follow after unblock")
	b2 := f.post("bob", "b2")
	f.fanout()
	if got := f.timeline("alice", 10); !slices.Contains(got, b2.ID) {
		t.Errorf("after unblock+follow, alice's timeline %v lacks %d", got, b2.ID)
	}
	// mutual blocks: one lifted, the other stands
	f.must(f.s.Block(f.ctx, "alice", "bob"), "block")
	f.must(f.s.Block(f.ctx, "bob", "alice"), "block back")
	f.must(f.s.Unblock(f.ctx, "alice", "bob"), "unblock one")
	for _, p := range [][2]string{{"alice", "bob"}, {"bob", "alice"}} {
		if err := f.s.Follow(f.ctx, p[0], p[1]); !errors.Is(err, feed.ErrBlocked) {
			t.Errorf("Follow(%s, %s) with bob's block standing = %v, want ErrBlocked", p[0], p[1], err)
		}
	}
	// self-block / self-mute: whatever the answer, nothing breaks reads
	_ = f.s.Block(f.ctx, "carol", "carol")
	f.timeline("carol", 10)
}

// AuthorPosts: "Cursors have Timeline's format and guarantees (a (score, id)
// position, authenticated with Config.CursorKey and bound to this author's
// page ...)" and CursorKey: "any cursor not made for that reader (or page)
// with that key is ErrCursor."
func TestRedTeamCursorCrossUse(t *testing.T) {
	f := newRT(t, feed.Config{CursorKey: []byte("0123456789abcdef0123")})
	f.timeline("alice", 10)
	f.must(f.s.Follow(f.ctx, "alice", "bob"), "follow")
	f.must(f.s.Follow(f.ctx, "alice", "carol"), "follow")
	for i := range 6 {
		f.post("bob", fmt.Sprint("b", i))
		f.post("carol", fmt.Sprint("c", i))
	}
	f.fanout()
	bp, err := f.s.AuthorPosts(f.ctx, "bob", "", 2)
	f.must(err, "AuthorPosts")
	tp, err := f.s.Timeline(f.ctx, "alice", "", 2)
	f.must(err, "Timeline")
	if bp.Next == "" || tp.Next == "" {
		t.Fatalf("no Next: %q %q", bp.Next, tp.Next)
	}
	if _, err := f.s.AuthorPosts(f.ctx, "carol", bp.Next, 2); !errors.Is(err, feed.ErrCursor) {
		t.Errorf("bob's profile cursor on carol's profile = %v, want ErrCursor", err)
	}
	if _, err := f.s.Timeline(f.ctx, "alice", bp.Next, 2); !errors.Is(err, feed.ErrCursor) {
		t.Errorf("bob's profile cursor on alice's Timeline = %v, want ErrCursor", err)
	}
	if _, err := f.s.Timeline(f.ctx, "bob", bp.Next, 2); !errors.Is(err, feed.ErrCursor) {
		t.Errorf("bob's profile cursor on bob's Timeline = %v, want ErrCursor", err)
	}
	if _, err := f.s.AuthorPosts(f.ctx, "alice", tp.Next, 2); !errors.Is(err, feed.ErrCursor) {
		t.Errorf("alice's Timeline cursor on alice's profile = %v, want ErrCursor", err)
	}
	if _, err := f.s.AuthorPosts(f.ctx, "bob", tp.Next, 2); !errors.Is(err, feed.ErrCursor) {
		t.Errorf("alice's Timeline cursor on bob's profile = %v, want ErrCursor", err)
	}
	if _, err := f.s.AuthorPosts(f.ctx, "bob", bp.Next, 2); err != nil {
		t.Errorf("bob's own cursor = %v", err)
	}
	// tampered
	b := []byte(bp.Next)
	for i := range b {
		c := slices.Clone(b)
		c[i] ^= 1
		if _, err := f.s.AuthorPosts(f.ctx, "bob", string(c), 2); !errors.Is(err, feed.ErrCursor) {
			t.Errorf("tampered profile cursor %q = %v, want ErrCursor", c, err)
			break
		}
	}
}

// Without a CursorKey: "a well-formed one Timeline never made reads the
// reader's own timeline from there (it shows nothing the reader could not
// page to)". A profile cursor of another author used on a Timeline must not
// show posts of accounts the reader does not follow.
func TestRedTeamCursorCrossUseNoKey(t *testing.T) {
	f := newRT(t, feed.Config{})
	f.timeline("alice", 10)
	f.must(f.s.Follow(f.ctx, "alice", "carol"), "follow")
	for i := range 6 {
		f.post("bob", fmt.Sprint("b", i))
		f.post("carol", fmt.Sprint("c", i))
	}
	f.fanout()
	bp, err := f.s.AuthorPosts(f.ctx, "bob", "", 2)
	f.must(err, "AuthorPosts")
	p, err := f.s.Timeline(f.ctx, "alice", bp.Next, 10)
	if err == nil {
		for _, post := range p.Posts {
			if post.Author != "carol" {
				t.Errorf("alice's Timeline from bob's profile cursor shows %s's post %d", post.Author, post.ID)
			}
		}
	} else if !errors.Is(err, feed.ErrCursor) {
		t.Errorf("Timeline with a profile cursor = %v", err)
	}
	tp, err := f.s.Timeline(f.ctx, "alice", "", 2)
	f.must(err, "Timeline")
	p2, err := f.s.AuthorPosts(f.ctx, "bob", tp.Next, 10)
	if err == nil {
		for _, post := range p2.Posts {
			if post.Author != "bob" {
				t.Errorf("bob's profile from a timeline cursor shows %s's post", post.Author)
			}
		}
	} else if !errors.Is(err, feed.ErrCursor) {
		t.Errorf("AuthorPosts with a timeline cursor = %v", err)
	}
}

// "AuthorPosts returns up to n of author's live posts, newest first ...
// deleted posts are never shown", across the outbox/SQL boundary; "posts
// published later never shift a page".
func TestRedTeamAuthorPostsDeletes(t *testing.T) {
	f := newRT(t, feed.Config{OutboxCap: 4})
	var posts []feed.Post
	for i := range 13 {
		posts = append(posts, f.post("bob", fmt.Sprint("b", i)))
	}
	f.post("carol", "c")
	deleted := map[int64]bool{}
	for _, i := range []int{0, 3, 8, 9, 10, 12} {
		f.must(f.s.Delete(f.ctx, "bob", posts[i].ID), "delete")
		f.must(f.s.Delete(f.ctx, "bob", posts[i].ID), "delete again")
		deleted[posts[i].ID] = true
	}
	var want []int64
	for _, id := range rev(posts) {
		if !deleted[id] {
			want = append(want, id)
		}
	}
	for _, size := range []int{1, 2, 3, 4, 5, 7, 20} {
		if got := f.authorPosts("bob", size); !slices.Equal(got, want) {
			t.Errorf("profile in pages of %d: %v, want %v", size, got, want)
		}
	}
	// posts published while paging do not shift it
	var got []int64
	cursor := ""
	for i := 0; ; i++ {
		p, err := f.s.AuthorPosts(f.ctx, "bob", cursor, 2)
		f.must(err, "AuthorPosts")
		for _, post := range p.Posts {
			got = append(got, post.ID)
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
		if i < 3 {
			f.post("bob", fmt.Sprint("late", i))
		}
		if i == 1 {
			// delete one not yet shown
			f.must(f.s.Delete(f.ctx, "bob", posts[1].ID), "delete while paging")
			deleted[posts[1].ID] = true
		}
	}
	var want2 []int64
	for _, id := range want {
		if !deleted[id] {
			want2 = append(want2, id)
		}
	}
	if !slices.Equal(got, want2) {
		t.Errorf("paging while publishing and deleting: %v, want %v", got, want2)
	}
	// a profile of nobody
	if got := f.authorPosts("nobody", 3); len(got) != 0 {
		t.Errorf("profile of nobody: %v", got)
	}
}

// SetMarker: "The marker only moves forward: setting an older post ...
// changes nothing"; "The post may have been deleted since; one that never
// existed is ErrNotFound." Marker: "returns the post id of user's read
// marker, 0 when there is none." UnreadSince: "an upper bound of what
// Timeline would show above the marker, exact when none of these is in the
// inbox" (deleted, muted, late-unfollowed, promoted).
func TestRedTeamMarker(t *testing.T) {
	f := newRT(t, feed.Config{})
	f.timeline("alice", 10)
	if m, err := f.s.Marker(f.ctx, "alice"); err != nil || m != 0 {
		t.Errorf("Marker with none = %d, %v", m, err)
	}
	f.must(f.s.Follow(f.ctx, "alice", "bob"), "follow")
	var ps []feed.Post
	for i := range 6 {
		ps = append(ps, f.post("bob", fmt.Sprint("b", i)))
	}
	f.fanout()
	if got := f.timeline("alice", 10); len(got) != 6 {
		t.Fatalf("timeline %v", got)
	}
	n, err := f.s.UnreadSince(f.ctx, "alice")
	f.must(err, "UnreadSince")
	if n != 6 {
		t.Errorf("UnreadSince without a marker = %d, want 6", n)
	}
	f.must(f.s.SetMarker(f.ctx, "alice", ps[2].ID), "SetMarker")
	if n, _ := f.s.UnreadSince(f.ctx, "alice"); n != 3 {
		t.Errorf("UnreadSince at ps[2] = %d, want 3", n)
	}
	// backward: no change
	f.must(f.s.SetMarker(f.ctx, "alice", ps[0].ID), "SetMarker backward")
	if m, _ := f.s.Marker(f.ctx, "alice"); m != ps[2].ID {
		t.Errorf("Marker after a backward SetMarker = %d, want %d", m, ps[2].ID)
	}
	if n, _ := f.s.UnreadSince(f.ctx, "alice"); n != 3 {
		t.Errorf("UnreadSince after backward SetMarker = %d, want 3", n)
	}
	// same again: idempotent
	f.must(f.s.SetMarker(f.ctx, "alice", ps[2].ID), "SetMarker same")
	// nonexistent ids
	for _, id := range []int64{ps[5].ID + 1<<40, 1, -1, 0} {
		if err := f.s.SetMarker(f.ctx, "alice", id); !errors.Is(err, feed.ErrNotFound) && !errors.Is(err, feed.ErrInvalid) {
			t.Errorf("SetMarker(%d) never existed = %v, want ErrNotFound", id, err)
		}
	}
	if err := f.s.SetMarker(f.ctx, "alice", ps[5].ID+1<<40); !errors.Is(err, feed.ErrNotFound) {
		t.Errorf("SetMarker(nonexistent well-formed id) = %v, want ErrNotFound", err)
	}
	if m, _ := f.s.Marker(f.ctx, "alice"); m != ps[2].ID {
		t.Errorf("Marker after refused SetMarkers = %d, want %d", m, ps[2].ID)
	}
	// a deleted post: allowed, marker moves to its position
	f.must(f.s.Delete(f.ctx, "bob", ps[3].ID), "delete")
	if err := f.s.SetMarker(f.ctx, "alice", ps[3].ID); err != nil {
		t.Errorf("SetMarker(deleted post) = %v, want nil", err)
	}
	if m, _ := f.s.Marker(f.ctx, "alice"); m != ps[3].ID {
		t.Errorf("Marker after SetMarker(deleted) = %d, want %d", m, ps[3].ID)
	}
	// Timeline above the marker now: ps[5], ps[4]
	if n, _ := f.s.UnreadSince(f.ctx, "alice"); n < 2 || n > 2 {
		t.Errorf("UnreadSince at deleted ps[3] = %d, want 2 (ps[4], ps[5])", n)
	}
	// a post of someone not followed, newer than all: marker moves forward
	c := f.post("carol", "c")
	f.must(f.s.SetMarker(f.ctx, "alice", c.ID), "SetMarker(unfollowed author's post)")
	if m, _ := f.s.Marker(f.ctx, "alice"); m != c.ID {
		t.Errorf("Marker = %d, want carol's %d", m, c.ID)
	}
	if n, _ := f.s.UnreadSince(f.ctx, "alice"); n != 0 {
		t.Errorf("UnreadSince at a newer post = %d, want 0", n)
	}
	// new posts after it count
	b6 := f.post("bob", "b6")
	f.fanout()
	if n, _ := f.s.UnreadSince(f.ctx, "alice"); n != 1 {
		t.Errorf("UnreadSince after one more post = %d, want 1", n)
	}
	// a post of the same score: posts in one millisecond ordered by id
	f.must(f.s.SetMarker(f.ctx, "alice", b6.ID), "SetMarker")
	if n, _ := f.s.UnreadSince(f.ctx, "alice"); n != 0 {
		t.Errorf("UnreadSince at the newest = %d, want 0", n)
	}
	// marker of a user with no inbox at all
	if n, err := f.s.UnreadSince(f.ctx, "zed"); err != nil || n != 0 {
		t.Errorf("UnreadSince(zed) = %d, %v", n, err)
	}
}

// Same-millisecond posts: "a ZCOUNT strictly above the marker's score and
// the few entries at exactly its score, ordered by id as Timeline orders
// them".
func TestRedTeamMarkerSameScore(t *testing.T) {
	f := newRT(t, feed.Config{})
	f.timeline("alice", 10)
	f.must(f.s.Follow(f.ctx, "alice", "bob"), "follow")
	f.must(f.s.Follow(f.ctx, "alice", "carol"), "follow")
	f.clk.Add(time.Millisecond)
	for i := range 5 {
		a := []string{"bob", "carol"}[i%2]
		_, err := f.s.Publish(f.ctx, feed.PublishRequest{Author: a, RequestID: fmt.Sprint("s", i), Body: "x"})
		f.must(err, "publish")
	}
	f.fanout()
	tl := f.timeline("alice", 10)
	if len(tl) != 5 {
		t.Fatalf("timeline %v", tl)
	}
	// set the marker at each timeline position from the bottom up
	for i := len(tl) - 1; i >= 0; i-- {
		f.must(f.s.SetMarker(f.ctx, "alice", tl[i]), "SetMarker")
		n, err := f.s.UnreadSince(f.ctx, "alice")
		f.must(err, "UnreadSince")
		if n != int64(i) {
			t.Errorf("marker at timeline[%d] (same ms): UnreadSince %d, want %d", i, n, i)
		}
	}
}

// Mute/Unmute racing with Timeline reads: after quiescence the timeline
// reflects the last call per author ("hides ... from the next read until
// Unmute"; "shows ... again from the next read").
func TestRedTeamMuteRace(t *testing.T) {
	for _, celeb := range []bool{false, true} {
		t.Run(fmt.Sprint("celebrity=", celeb), func(t *testing.T) {
			cfg := feed.Config{}
			if celeb {
				cfg.CelebrityThreshold = 1
			}
			f := newRT(t, cfg)
			f.timeline("alice", 10)
			authors := []string{"a0", "a1", "a2", "a3", "a4", "a5"}
			byAuthor := map[string][]int64{}
			for _, a := range authors {
				f.must(f.s.Follow(f.ctx, "alice", a), "follow")
			}
			f.clk.Add(time.Second)
			for i := range 3 {
				for _, a := range authors {
					p := f.post(a, fmt.Sprint(a, "-", i))
					byAuthor[a] = append(byAuthor[a], p.ID)
				}
			}
			f.fanout()
			final := make([]bool, len(authors)) // muted at the end
			var wg sync.WaitGroup
			errs := make(chan error, 100)
			for i, a := range authors {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(i), 7))
					muted := false
					for range 15 {
						var err error
						if rng.IntN(2) == 0 {
							err, muted = f.s.Mute(f.ctx, "alice", a), true
						} else {
							err, muted = f.s.Unmute(f.ctx, "alice", a), false
						}
						if err != nil {
							errs <- err
							return
						}
					}
					final[i] = muted
				}()
			}
			var readErrs sync.Map // error text → count
			reads := 0
			var readMu sync.Mutex
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 15 {
						readMu.Lock()
						reads += 2
						readMu.Unlock()
						if _, err := f.s.Timeline(f.ctx, "alice", "", 50); err != nil {
							v, _ := readErrs.LoadOrStore("Timeline: "+err.Error(), new(int))
							readMu.Lock()
							*v.(*int)++
							readMu.Unlock()
						}
						if _, err := f.s.UnreadSince(f.ctx, "alice"); err != nil {
							v, _ := readErrs.LoadOrStore("UnreadSince: "+err.Error(), new(int))
							readMu.Lock()
							*v.(*int)++
							readMu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			readErrs.Range(func(k, v any) bool {
				t.Errorf("a read racing Mute/Unmute failed (%d of %d reads): %s", *v.(*int), reads, k)
				return true
			})
			want := map[int64]bool{}
			for i, a := range authors {
				if !final[i] {
					for _, id := range byAuthor[a] {
						want[id] = true
					}
				}
			}
			got := f.timeline("alice", 4)
			gotSet := map[int64]bool{}
			for _, id := range got {
				if gotSet[id] {
					t.Errorf("post %d twice", id)
				}
				gotSet[id] = true
				if !want[id] {
					t.Errorf("post %d shown though its author's last call was Mute (final %v)", id, final)
				}
			}
			for id := range want {
				if !gotSet[id] {
					t.Errorf("post %d missing though its author's last call was Unmute (final %v)", id, final)
				}
			}
		})
	}
}

// Block/Unfollow "take effect at once, even for a chunk applied late";
// UnreadSince "Blocks need no subtraction: a block removes the follows, as
// an unfollow does", and it is exact once a read has passed deleted posts.
func TestRedTeamUnreadExactness(t *testing.T) {
	f := newRT(t, feed.Config{})
	f.timeline("alice", 10)
	f.must(f.s.Follow(f.ctx, "alice", "bob"), "follow")
	f.must(f.s.Follow(f.ctx, "alice", "carol"), "follow")
	f.must(f.s.Follow(f.ctx, "alice", "dave"), "follow")
	var bobs, carols, daves []feed.Post
	for i := range 4 {
		bobs = append(bobs, f.post("bob", fmt.Sprint("b", i)))
		carols = append(carols, f.post("carol", fmt.Sprint("c", i)))
		daves = append(daves, f.post("dave", fmt.Sprint("d", i)))
	}
	f.fanout()
	if got := f.timeline("alice", 5); len(got) != 12 {
		t.Fatalf("timeline %v", got)
	}
	if n, _ := f.s.UnreadSince(f.ctx, "alice"); n != 12 {
		t.Errorf("UnreadSince = %d, want 12", n)
	}
	// block bob: his pushed posts go, at once
	f.must(f.s.Block(f.ctx, "alice", "bob"), "block")
	if n, _ := f.s.UnreadSince(f.ctx, "alice"); n != 8 {
		t.Errorf("UnreadSince after Block(bob) = %d, want 8", n)
	}
	// unfollow dave
	f.must(f.s.Unfollow(f.ctx, "alice", "dave"), "unfollow")
	if n, _ := f.s.UnreadSince(f.ctx, "alice"); n != 4 {
		t.Errorf("UnreadSince after Unfollow(dave) = %d, want 4", n)
	}
	// a chunk applied late: bob posts, alice blocks... (bob's new post is
	// fanned out to nobody since no follow remains). Carol posts, alice
	// blocks carol before the fan-out: the late chunk is hidden.
	late := f.post("carol", "late")
	f.must(f.s.Block(f.ctx, "alice", "carol"), "block carol")
	f.fanout()
	got := f.timeline("alice", 5)
	if len(got) != 0 {
		t.Errorf("timeline after blocking everyone followed but none: %v (late %d)", got, late.ID)
	}
	// deletes passed by a read are not counted
	f.must(f.s.Unblock(f.ctx, "alice", "carol"), "unblock")
	f.must(f.s.Follow(f.ctx, "alice", "carol"), "refollow")
	live := f.timeline("alice", 3)
	f.must(f.s.Delete(f.ctx, "carol", carols[1].ID), "delete")
	f.must(f.s.Delete(f.ctx, "carol", carols[2].ID), "delete")
	after := f.timeline("alice", 100)
	if len(after) != len(live)-2 {
		t.Errorf("timeline after 2 deletes: %v (before %v)", after, live)
	}
	if n, _ := f.s.UnreadSince(f.ctx, "alice"); n != int64(len(after)) {
		t.Errorf("UnreadSince after a read passed the deletes = %d, want %d (timeline %v)", n, len(after), after)
	}
	_ = bobs
	_ = daves
}

// The smallest form of TestRedTeamMuteRace's read failures: one goroutine
// toggling Mute/Unmute of one followed author, one reading Timeline.
// "Service ... is safe for concurrent use"; Mute/Unmute apply "from the next
// read".
func TestRedTeamMuteRaceMinimal(t *testing.T) {
	f := newRT(t, feed.Config{})
	f.timeline("alice", 10)
	f.must(f.s.Follow(f.ctx, "alice", "bob"), "follow")
	f.post("bob", "b0")
	f.fanout()
	f.timeline("alice", 10)
	if fails, first := readsRacing(f, func(i int) {
		if i%2 == 0 {
			f.s.Mute(f.ctx, "alice", "bob")
		} else {
			f.s.Unmute(f.ctx, "alice", "bob")
		}
	}); fails > 0 {
		t.Errorf("%d of 100 Timeline reads failed while Mute/Unmute ran; first: %s", fails, first)
	}
}

// Comparison for TestRedTeamMuteRaceMinimal: the same with Follow/Unfollow
// of a second account toggled instead of a mute.
func TestRedTeamFollowRaceMinimal(t *testing.T) {
	f := newRT(t, feed.Config{})
	f.timeline("alice", 10)
	f.must(f.s.Follow(f.ctx, "alice", "bob"), "follow")
	f.post("bob", "b0")
	f.post("carol", "c0")
	f.fanout()
	f.timeline("alice", 10)
	if fails, first := readsRacing(f, func(i int) {
		if i%2 == 0 {
			f.s.Follow(f.ctx, "alice", "carol")
		} else {
			f.s.Unfollow(f.ctx, "alice", "carol")
		}
	}); fails > 0 {
		t.Errorf("%d of 100 Timeline reads failed while Follow/Unfollow ran; first: %s", fails, first)
	}
}

// readsRacing reads alice's first page 100 times while another goroutine
// calls change(0..99), and returns how many reads failed and the first
// failure.
func readsRacing(f *fixture, change func(i int)) (fails int, first string) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 100 {
			change(i)
		}
	}()
	for range 100 {
		if _, err := f.s.Timeline(f.ctx, "alice", "", 10); err != nil {
			if fails == 0 {
				first = err.Error()
			}
			fails++
		}
	}
	wg.Wait()
	return fails, first
}
