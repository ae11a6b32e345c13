package notify_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/feed/notify"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
)

// rtFeed is a Feed on a fresh namespace with a settable clock at an hour.
func rtFeed(t *testing.T, cfg notify.Config) (*notify.Feed, *testenv.Clock, *testenv.Redis) {
	t.Helper()
	return rtFeedOn(t, testenv.NewRedis(t), cfg)
}

func rtFeedOn(t *testing.T, r *testenv.Redis, cfg notify.Config) (*notify.Feed, *testenv.Clock, *testenv.Redis) {
	t.Helper()
	clk := testenv.NewClock(testenv.Now().UTC().Truncate(time.Hour))
	cfg.Namespace, cfg.Now = r.Namespace, clk.Now
	f, err := notify.New(r.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, clk, r
}

func rtAll(t *testing.T, f *notify.Feed, user string, n int) []notify.Group {
	t.Helper()
	var out []notify.Group
	cursor := ""
	for i := 0; ; i++ {
		if i > 10000 {
			t.Fatal("paging does not end")
		}
		p, err := f.Groups(context.Background(), user, cursor, n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Groups...)
		if p.Next == "" {
			return out
		}
		cursor = p.Next
	}
}

func rtCounts(t *testing.T, f *notify.Feed, user string) notify.Counts {
	t.Helper()
	c, err := f.Counts(context.Background(), user)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// "ID is unique per activity: the exactly-once key (a redelivered or
// re-sent activity carries the same ID)." / "an ID applied before (within
// DedupeTTL) changes nothing."
func TestRedTeamForgedRedelivery(t *testing.T) {
	f, clk, _ := rtFeed(t, notify.Config{})
	ctx := context.Background()
	now := clk.Now()
	a := notify.Activity{ID: "x1", Actor: "bob", Verb: "like", Object: "post:1", Target: "alice", Time: now}
	if err := f.Add(ctx, a); err != nil {
		t.Fatal(err)
	}
	forged := []notify.Activity{
		{ID: "x1", Actor: "mallory", Verb: "like", Object: "post:1", Target: "alice", Time: now},
		{ID: "x1", Actor: "bob", Verb: "comment", Object: "post:1", Target: "alice", Time: now},
		{ID: "x1", Actor: "bob", Verb: "like", Object: "post:2", Target: "alice", Time: now},
		{ID: "x1", Actor: "bob", Verb: "like", Object: "post:1", Target: "alice", Time: now.Add(-30 * time.Hour)},
	}
	for _, b := range forged {
		if err := f.Add(ctx, b); err != nil {
			t.Fatalf("Add(%+v) = %v", b, err)
		}
	}
	gs := rtAll(t, f, "alice", 10)
	if len(gs) != 1 || gs[0].ActorCount != 1 || gs[0].Object != "post:1" || gs[0].Verb != "like" || len(gs[0].Actors) != 1 || gs[0].Actors[0] != "bob" {
		t.Fatalf("after forged redeliveries of ID x1: groups %+v, want only the first activity's group", gs)
	}
	// through Handle too
	for _, b := range forged {
		v, err := notify.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Handle(ctx, nil, v); err != nil {
			t.Fatalf("Handle: %v", err)
		}
	}
	if gs := rtAll(t, f, "alice", 10); len(gs) != 1 || gs[0].ActorCount != 1 {
		t.Fatalf("after Handle of forged redeliveries: %+v", gs)
	}
}

// The group id is "<window>:<verb>:<object>"; verbs are [a-z0-9_] so no
// two (verb, object) pairs may share a group, whatever ':' the object holds.
func TestRedTeamColonObjectsDoNotCollide(t *testing.T) {
	f, clk, _ := rtFeed(t, notify.Config{})
	ctx := context.Background()
	now := clk.Now()
	pairs := [][2]string{
		{"like", "a:b"}, {"like", "a"}, {"like", "a:b:"}, {"like", ":a:b"}, {"like_a", "b"}, {"like", "b"},
		{"a", "like:b"}, {"like", "1:like:a"}, {"like", "{n:alice}:groups"}, {"like", "}{"},
		{"like", strings.Repeat(":", 64)}, {"like", strings.Repeat("z", 64)},
	}
	for i, p := range pairs {
		if err := f.Add(ctx, notify.Activity{ID: fmt.Sprint("c", i), Actor: "bob", Verb: p[0], Object: p[1], Target: "alice", Time: now}); err != nil {
			t.Fatalf("Add(%q, %q) = %v", p[0], p[1], err)
		}
	}
	gs := rtAll(t, f, "alice", 5)
	if len(gs) != len(pairs) {
		t.Fatalf("%d groups for %d distinct (verb, object) pairs: %+v", len(gs), len(pairs), gs)
	}
	seen := map[[2]string]bool{}
	ids := map[string]bool{}
	for _, g := range gs {
		seen[[2]string{g.Verb, g.Object}] = true
		if ids[g.ID] {
			t.Errorf("group id %q twice", g.ID)
		}
		ids[g.ID] = true
		if g.ActorCount != 1 {
			t.Errorf("group %q: ActorCount %d", g.ID, g.ActorCount)
		}
		if !strings.HasSuffix(g.ID, ":"+g.Verb+":"+g.Object) {
			t.Errorf("group id %q is not <window>:%s:%s", g.ID, g.Verb, g.Object)
		}
	}
	for _, p := range pairs {
		if !seen[p] {
			t.Errorf("no group for %q", p)
		}
	}
	// each id marks its own group only
	for _, g := range gs {
		c, err := f.MarkRead(ctx, "alice", g.ID)
		if err != nil {
			t.Fatalf("MarkRead(%q) = %v", g.ID, err)
		}
		_ = c
	}
	if c := rtCounts(t, f, "alice"); c.Unread != 0 || c.Unseen != 0 {
		t.Fatalf("after MarkRead of every id: %+v", c)
	}
}

// "All of one user's keys share the hash tag {n:<user>}" with the id keys
// "{n:u}:id:<id>" and ids being any printable ASCII: an activity id must not
// be able to land on another user's keys (exactly once, for both users).
func TestRedTeamKeyInjectionAcrossUsers(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) { keyInjection(t, r) })
}

func keyInjection(t *testing.T, r *testenv.Redis) {
	f, clk, _ := rtFeedOn(t, r, notify.Config{})
	ctx := context.Background()
	now := clk.Now()
	// user "a}:id:x" has groups key "{n:a}:id:x}:groups"; target "a" with id
	// "x}:groups" has id key "{n:a}:id:x}:groups" if keys are spliced raw.
	u2 := "a}:id:x"
	if err := f.Add(ctx, notify.Activity{ID: "first", Actor: "bob", Verb: "like", Object: "o1", Target: u2, Time: now}); err != nil {
		t.Fatalf("Add to %q: %v", u2, err)
	}
	if err := f.Add(ctx, notify.Activity{ID: "x}:groups", Actor: "bob", Verb: "like", Object: "o2", Target: "a", Time: now}); err != nil {
		t.Fatalf("Add to a: %v", err)
	}
	if gs := rtAll(t, f, "a", 10); len(gs) != 1 {
		t.Errorf("user a: %d groups, want 1 (an activity applied zero times): %+v", len(gs), gs)
	}
	if gs := rtAll(t, f, u2, 10); len(gs) != 1 {
		t.Errorf("user %q: %d groups, want 1: %+v", u2, len(gs), gs)
	}
	// the other order: id key first, then the user whose groups key it is
	if err := f.Add(ctx, notify.Activity{ID: "y}:groups", Actor: "bob", Verb: "like", Object: "o3", Target: "b", Time: now}); err != nil {
		t.Fatalf("Add to b: %v", err)
	}
	u3 := "b}:id:y"
	if err := f.Add(ctx, notify.Activity{ID: "second", Actor: "bob", Verb: "like", Object: "o4", Target: u3, Time: now}); err != nil {
		t.Errorf("Add to %q after an id key of b: %v", u3, err)
	}
	if gs := rtAll(t, f, u3, 10); len(gs) != 1 {
		t.Errorf("user %q: %d groups, want 1", u3, len(gs))
	}
	// actor-set keys: "{n:u}:actors:<gid>" with an object holding "}:"
	u4 := "c}:actors:"
	if err := f.Add(ctx, notify.Activity{ID: "third", Actor: "bob", Verb: "like", Object: "o5", Target: u4, Time: now}); err != nil {
		t.Fatalf("Add to %q: %v", u4, err)
	}
	gs4 := rtAll(t, f, u4, 10)
	if len(gs4) != 1 {
		t.Fatalf("user %q: %+v", u4, gs4)
	}
	// user "c" group with object "o}:data" would have actors key
	// "{n:c}:actors:<w>:like:o}:data"; user "c}:actors:<w>:like:o" has data key of that name.
	w := strings.SplitN(gs4[0].ID, ":", 2)[0]
	u5 := "c}:actors:" + w + ":like:o"
	if err := f.Add(ctx, notify.Activity{ID: "fourth", Actor: "bob", Verb: "like", Object: "p", Target: u5, Time: now}); err != nil {
		t.Fatalf("Add to %q: %v", u5, err)
	}
	if err := f.Add(ctx, notify.Activity{ID: "fifth", Actor: "carol", Verb: "like", Object: "o}:data", Target: "c", Time: now}); err != nil {
		t.Errorf("Add to c with object o}:data: %v", err)
	}
	if gs := rtAll(t, f, "c", 10); len(gs) != 1 || gs[0].ActorCount != 1 {
		t.Errorf("user c: %+v, want one group of one actor", gs)
	}
	if gs := rtAll(t, f, u5, 10); len(gs) != 1 || gs[0].ActorCount != 1 || gs[0].Object != "p" {
		t.Errorf("user %q: %+v, want one group (p, 1 actor)", u5, gs)
	}
}

// "Actor, Object and Target are ids: 1..64 bytes of printable ASCII."
// "Verb is 1..32 bytes of [a-z0-9_], starting with a letter."
func TestRedTeamFieldLimits(t *testing.T) {
	f, clk, _ := rtFeed(t, notify.Config{})
	ctx := context.Background()
	now := clk.Now()
	good := notify.Activity{ID: "g", Actor: "bob", Verb: "like", Object: "o", Target: "alice", Time: now}
	n := 0
	mk := func(mod func(*notify.Activity)) notify.Activity {
		n++
		a := good
		a.ID = fmt.Sprint("lim", n)
		mod(&a)
		return a
	}
	ok := []notify.Activity{
		mk(func(a *notify.Activity) { a.Actor = strings.Repeat("a", 64) }),
		mk(func(a *notify.Activity) { a.Object = strings.Repeat("~", 64) }),
		mk(func(a *notify.Activity) { a.Target = strings.Repeat("t", 64) }),
		mk(func(a *notify.Activity) { a.Verb = "v" + strings.Repeat("_", 31) }),
		mk(func(a *notify.Activity) { a.Verb = "a0_z9" }),
		mk(func(a *notify.Activity) { a.Object = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~" }),
	}
	for _, a := range ok {
		if err := f.Add(ctx, a); err != nil {
			t.Errorf("Add(%+v) = %v, want nil", a, err)
		}
	}
	bad := []notify.Activity{
		mk(func(a *notify.Activity) { a.Actor = strings.Repeat("a", 65) }),
		mk(func(a *notify.Activity) { a.Object = strings.Repeat("o", 65) }),
		mk(func(a *notify.Activity) { a.Target = strings.Repeat("t", 65) }),
		mk(func(a *notify.Activity) { a.Verb = "v" + strings.Repeat("_", 32) }),
		mk(func(a *notify.Activity) { a.Verb = "_like" }),
		mk(func(a *notify.Activity) { a.Verb = "9like" }),
		mk(func(a *notify.Activity) { a.Verb = "li:ke" }),
		mk(func(a *notify.Activity) { a.Verb = "" }),
		mk(func(a *notify.Activity) { a.Object = "post\x00" }),
		mk(func(a *notify.Activity) { a.Object = "post\n1" }),
		mk(func(a *notify.Activity) { a.Object = "post\x7f" }),
		mk(func(a *notify.Activity) { a.Object = "пост" }),
		mk(func(a *notify.Activity) { a.Actor = "bób" }),
		mk(func(a *notify.Activity) { a.Target = "ali\tce" }),
		mk(func(a *notify.Activity) { a.Object = "" }),
		mk(func(a *notify.Activity) { a.Actor = "" }),
		mk(func(a *notify.Activity) { a.Object = "\xff" }),
	}
	before := rtCounts(t, f, "alice")
	for _, a := range bad {
		if err := f.Add(ctx, a); !errors.Is(err, notify.ErrInvalid) {
			t.Errorf("Add(%q) = %v, want ErrInvalid", fmt.Sprintf("%+v", a), err)
		}
		if _, err := notify.Encode(a); !errors.Is(err, notify.ErrInvalid) {
			t.Errorf("Encode(%q) = %v, want ErrInvalid", fmt.Sprintf("%+v", a), err)
		}
	}
	if after := rtCounts(t, f, "alice"); after != before {
		t.Errorf("refused Adds changed counts: %+v → %+v", before, after)
	}
}

// Windows are "Config.Window long, counted from the Unix epoch in UTC";
// Add refuses "a Time more than MaxSkew ahead of Now or older than DedupeTTL".
func TestRedTeamWindowBoundaries(t *testing.T) {
	f, clk, _ := rtFeed(t, notify.Config{Window: time.Hour})
	ctx := context.Background()
	now := clk.Now() // on an hour: a window start
	add := func(id string, at time.Time) {
		t.Helper()
		if err := f.Add(ctx, notify.Activity{ID: id, Actor: id, Verb: "like", Object: "o", Target: "alice", Time: at}); err != nil {
			t.Fatalf("Add(%s at %v) = %v", id, at, err)
		}
	}
	add("a", now.Add(-time.Millisecond))           // previous window, its last ms
	add("b", now)                                  // this window, its first ms
	add("c", now.Add(time.Minute))                 // this window
	add("d", now.Add(-time.Hour))                  // previous window, its first ms
	add("e", now.Add(-time.Hour-time.Millisecond)) // the one before
	gs := rtAll(t, f, "alice", 10)
	if len(gs) != 3 {
		t.Fatalf("%d groups, want 3: %+v", len(gs), gs)
	}
	byActors := map[int64]notify.Group{}
	for _, g := range gs {
		byActors[g.ActorCount] = g
	}
	if g := gs[0]; g.ActorCount != 1 || g.Actors[0] != "e" || !g.First.Equal(now.Add(-time.Hour-time.Millisecond)) {
		t.Errorf("newest-updated group %+v, want e's", g)
	}
	for _, g := range gs {
		switch {
		case len(g.Actors) == 2 && g.Actors[0] == "a":
			if !g.First.Equal(now.Add(-time.Hour)) || !g.Last.Equal(now.Add(-time.Millisecond)) {
				t.Errorf("group a,d: first %v last %v", g.First, g.Last)
			}
		case len(g.Actors) == 2 && g.Actors[0] == "b":
			if !g.First.Equal(now) || !g.Last.Equal(now.Add(time.Minute)) {
				t.Errorf("group b,c: first %v last %v", g.First, g.Last)
			}
		case len(g.Actors) == 1 && g.Actors[0] == "e":
		default:
			t.Errorf("unexpected group %+v", g)
		}
	}
	// skew and age limits
	if err := f.Add(ctx, notify.Activity{ID: "f1", Actor: "x", Verb: "like", Object: "o", Target: "alice", Time: now.Add(notify.MaxSkew)}); err != nil {
		t.Errorf("Add at Now+MaxSkew = %v, want nil (refused only when more than MaxSkew ahead)", err)
	}
	for _, at := range []time.Time{now.Add(notify.MaxSkew + time.Millisecond), now.Add(1000 * time.Hour), now.Add(-2*time.Hour - time.Millisecond), time.Unix(0, 0), time.Unix(-86400*365, 0), {}} {
		if err := f.Add(ctx, notify.Activity{ID: "f-" + at.String(), Actor: "x", Verb: "like", Object: "o", Target: "alice", Time: at}); !errors.Is(err, notify.ErrInvalid) {
			t.Errorf("Add at %v (now %v) = %v, want ErrInvalid", at, now, err)
		}
	}
	if err := f.Add(ctx, notify.Activity{ID: "f2", Actor: "x", Verb: "like", Object: "o", Target: "alice", Time: now.Add(-2*time.Hour + time.Millisecond)}); err != nil {
		t.Errorf("Add just within DedupeTTL = %v", err)
	}
}

// MarkSeen/MarkRead: "Ids of no group ... are ignored"; "a malformed id is
// ErrInvalid and marks nothing". Another user's group id is of no group of
// this user; it must not touch the other user.
func TestRedTeamMarkForeignAndForgedIDs(t *testing.T) {
	f, clk, _ := rtFeed(t, notify.Config{})
	ctx := context.Background()
	now := clk.Now()
	for i, u := range []string{"alice", "bob"} {
		if err := f.Add(ctx, notify.Activity{ID: fmt.Sprint("m", i), Actor: "carol", Verb: "like", Object: "shared", Target: u, Time: now}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Add(ctx, notify.Activity{ID: "m9", Actor: "carol", Verb: "like", Object: "bobonly", Target: "bob", Time: now}); err != nil {
		t.Fatal(err)
	}
	bobs := rtAll(t, f, "bob", 10)
	var bobOnly string
	for _, g := range bobs {
		if g.Object == "bobonly" {
			bobOnly = g.ID
		}
	}
	c, err := f.MarkRead(ctx, "alice", bobOnly)
	if err != nil || c != (notify.Counts{Unseen: 1, Unread: 1}) {
		t.Errorf("MarkRead(alice, bob's group) = %+v, %v; want {1 1}, nil", c, err)
	}
	if c := rtCounts(t, f, "bob"); c != (notify.Counts{Unseen: 2, Unread: 2}) {
		t.Errorf("bob's counts after alice marked his id: %+v", c)
	}
	// forged but well formed: a window far away
	w := strings.SplitN(bobOnly, ":", 2)[0]
	for _, id := range []string{"0:like:shared", "1:like:shared", w + ":like:nothing", w + ":comment:shared"} {
		c, err := f.MarkSeen(ctx, "alice", id)
		if err != nil || c != (notify.Counts{Unseen: 1, Unread: 1}) {
			t.Errorf("MarkSeen(alice, %q) = %+v, %v; want {1 1}, nil", id, c, err)
		}
	}
	// malformed mixed with a good one: marks nothing
	for _, ids := range [][]string{
		{w + ":like:shared", "x:like:shared"}, {w + ":like:shared", w + ":like:"}, {w + ":like:shared", w + "::shared"},
		{w + ":like:shared", w + ":like:" + strings.Repeat("o", 65)}, {w + ":like:shared", w + ":like:o\n"},
		{w + ":like:shared", w}, {w + ":like:shared", w + ":like"},
	} {
		if _, err := f.MarkRead(ctx, "alice", ids...); !errors.Is(err, notify.ErrInvalid) {
			t.Errorf("MarkRead(%q) = %v, want ErrInvalid", ids, err)
		}
		if c := rtCounts(t, f, "alice"); c != (notify.Counts{Unseen: 1, Unread: 1}) {
			t.Fatalf("after refused MarkRead(%q): %+v", ids, c)
		}
	}
	// MaxMark exactly is accepted
	ids := make([]string, notify.MaxMark)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s:like:o%d", w, i)
	}
	ids[0] = w + ":like:shared"
	if c, err := f.MarkSeen(ctx, "alice", ids...); err != nil || c != (notify.Counts{Unseen: 0, Unread: 1}) {
		t.Errorf("MarkSeen of MaxMark ids = %+v, %v; want {0 1}", c, err)
	}
	// MarkSeen/MarkRead on a user with no feed
	if c, err := f.MarkRead(ctx, "nobody"); err != nil || c != (notify.Counts{}) {
		t.Errorf("MarkRead(nobody) = %+v, %v", c, err)
	}
}

// ErrCursor is returned for a cursor that is not one Groups makes; a
// well-formed forged one is only another place in the user's own groups.
func TestRedTeamCursorTampering(t *testing.T) {
	f, clk, _ := rtFeed(t, notify.Config{})
	ctx := context.Background()
	now := clk.Now()
	for i := range 6 {
		if err := f.Add(ctx, notify.Activity{ID: fmt.Sprint("t", i), Actor: "bob", Verb: "like", Object: fmt.Sprint("o", i), Target: "alice", Time: now}); err != nil {
			t.Fatal(err)
		}
		if err := f.Add(ctx, notify.Activity{ID: fmt.Sprint("m", i), Actor: "bob", Verb: "like", Object: fmt.Sprint("x", i), Target: "mallory", Time: now}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := f.Groups(ctx, "alice", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]bool{}
	for _, g := range all.Groups {
		own[g.ID] = true
	}
	p, err := f.Groups(ctx, "alice", "", 2)
	if err != nil || p.Next == "" {
		t.Fatalf("first page: %+v %v", p, err)
	}
	cur := p.Next
	var tampered []string
	for i := range len(cur) {
		for _, d := range []byte{1, 2, 0x20} {
			b := []byte(cur)
			b[i] ^= d
			tampered = append(tampered, string(b))
		}
	}
	tampered = append(tampered, cur+"0", cur[:len(cur)-1], "x"+cur, " "+cur, cur+" ", "-1", "0", "99999999999999999999999", "abc", "{}", "\x00", strings.Repeat("9", 1000))
	for _, c := range tampered {
		p2, err := f.Groups(ctx, "alice", c, 2)
		if err != nil {
			if !errors.Is(err, notify.ErrCursor) {
				t.Errorf("Groups(cursor %q) = %v, want ErrCursor", c, err)
			}
			continue
		}
		for _, g := range p2.Groups {
			if !own[g.ID] {
				t.Errorf("cursor %q showed group %q, not one of alice's", c, g.ID)
			}
		}
	}
	for _, n := range []int{0, -1, notify.MaxPage + 1} {
		if _, err := f.Groups(ctx, "alice", "", n); err == nil {
			t.Errorf("Groups(n=%d) accepted", n)
		}
	}
	if _, err := f.Groups(ctx, "alice", "", notify.MaxPage); err != nil {
		t.Errorf("Groups(n=MaxPage) = %v", err)
	}
}

// "A cursor is a place in the user's update order, so a group updated while
// paging moves to the top and is not shown twice on later pages. A full page
// always carries a Next, which may lead to an empty page."
func TestRedTeamPagingWhileAdding(t *testing.T) {
	f, clk, _ := rtFeed(t, notify.Config{Cap: 1000})
	ctx := context.Background()
	now := clk.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	const groups = 60
	id := 0
	add := func(obj int) {
		id++
		if err := f.Add(ctx, notify.Activity{ID: fmt.Sprint("p", id), Actor: fmt.Sprint("u", id%7), Verb: "like", Object: fmt.Sprint("o", obj), Target: "alice", Time: now}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range groups {
		add(i)
	}
	for round := range 20 {
		touched := map[string]bool{}
		shown := map[string]int{}
		cursor := ""
		nextNew := groups + round*1000
		for page := 0; ; page++ {
			p, err := f.Groups(ctx, "alice", cursor, 7)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Groups) == 7 && p.Next == "" {
				t.Fatalf("full page without Next")
			}
			for _, g := range p.Groups {
				shown[g.Object]++
				if shown[g.Object] > 1 {
					t.Fatalf("round %d: group %s shown twice", round, g.Object)
				}
			}
			if p.Next == "" {
				break
			}
			cursor = p.Next
			// between pages: update some existing groups and make new ones
			for range 3 {
				o := rng.IntN(groups)
				touched[fmt.Sprint("o", o)] = true
				add(o)
			}
			add(nextNew)
			touched[fmt.Sprint("o", nextNew)] = true
			nextNew++
		}
		for i := range groups {
			o := fmt.Sprint("o", i)
			if !touched[o] && shown[o] != 1 {
				t.Fatalf("round %d: untouched group %s shown %d times", round, o, shown[o])
			}
		}
	}
}

// Cap: "A user keeps Cap groups; making one more drops the least recently
// updated group, whole. An activity that arrives for a group that was dropped
// starts it afresh." and MarkSeen of a dropped id is ignored.
func TestRedTeamCapEvictionConcurrent(t *testing.T) {
	const capN = 10
	f, clk, r := rtFeed(t, notify.Config{Cap: capN})
	ctx := context.Background()
	now := clk.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				// objects overlap between workers; each id applied by two workers
				obj := (w*7 + i) % 40
				a := notify.Activity{ID: fmt.Sprintf("cap-%d-%d", w/2, i), Actor: fmt.Sprint("a", w/2), Verb: "like", Object: fmt.Sprint("o", (w/2*7+i)%40), Target: "alice", Time: now}
				_ = obj
				if err := f.Add(ctx, a); err != nil {
					errs <- err
					return
				}
				if i%5 == 0 {
					c, err := f.MarkSeen(ctx, "alice")
					if err != nil {
						errs <- err
						return
					}
					if c.Unseen < 0 || c.Unread < 0 || c.Unseen > capN || c.Unread > capN || c.Unseen > c.Unread {
						errs <- fmt.Errorf("MarkSeen counts %+v", c)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	gs := rtAll(t, f, "alice", 3)
	if len(gs) != capN {
		t.Errorf("%d groups at quiescence, want Cap %d", len(gs), capN)
	}
	unseen, unread := 0, 0
	for _, g := range gs {
		if !g.Seen {
			unseen++
		}
		if !g.Read {
			unread++
		}
		if g.ActorCount < 1 || int(g.ActorCount) < len(g.Actors) {
			t.Errorf("group %+v", g)
		}
	}
	if c := rtCounts(t, f, "alice"); c.Unseen != int64(unseen) || c.Unread != int64(unread) {
		t.Errorf("Counts %+v, groups say {%d %d}", c, unseen, unread)
	}
	// actor sets are deleted with their groups: count the actors keys
	var keys []string
	all, err := testenv.ScanKeys(ctx, r.Client, r.Namespace+"*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range all {
		if strings.Contains(k, "{n:alice}:actors:") {
			keys = append(keys, k)
		}
	}
	if len(keys) != capN {
		t.Errorf("%d actor-set keys for %d groups: %q", len(keys), capN, keys)
	}
	// a dropped group's id is ignored by MarkRead
	c, err := f.MarkRead(ctx, "alice", strings.SplitN(gs[0].ID, ":", 2)[0]+":like:never")
	if err != nil || c.Unread != int64(unread) {
		t.Errorf("MarkRead of an id of no group = %+v, %v", c, err)
	}
}

// Concurrency: "each activity is applied exactly once (by its ID) however
// often Kafka redelivers it or processes race"; counts returned never
// negative, Unseen ≤ Unread (a read group is seen), and at quiescence equal
// to the groups' flags.
func TestRedTeamConcurrentAddMark(t *testing.T) {
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(testenv.Now().UTC().Truncate(time.Hour))
	var feeds []*notify.Feed
	for range 2 {
		f, err := notify.New(r.Client, notify.Config{Namespace: r.Namespace, Now: clk.Now, Cap: 25, MaxActors: 3})
		if err != nil {
			t.Fatal(err)
		}
		feeds = append(feeds, f)
	}
	ctx := context.Background()
	now := clk.Now()
	// the stream: 300 activities on 40 objects by 12 actors
	var stream []notify.Activity
	distinct := map[string]map[string]bool{}
	for i := range 300 {
		a := notify.Activity{ID: fmt.Sprint("s", i), Actor: fmt.Sprint("a", i*7%12), Verb: "like", Object: fmt.Sprint("o", i*13%40), Target: "alice", Time: now.Add(-time.Duration(i%5) * time.Minute)}
		stream = append(stream, a)
		if distinct[a.Object] == nil {
			distinct[a.Object] = map[string]bool{}
		}
		distinct[a.Object][a.Actor] = true
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := feeds[w%2]
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for _, a := range stream {
				if err := f.Add(ctx, a); err != nil {
					errs <- err
					return
				}
				var c notify.Counts
				var err error
				switch rng.IntN(6) {
				case 0:
					c, err = f.MarkSeen(ctx, "alice")
				case 1:
					c, err = f.MarkRead(ctx, "alice", fmt.Sprintf("%s:like:%s", "0", a.Object))
				case 2:
					c, err = f.Counts(ctx, "alice")
				default:
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if c.Unseen < 0 || c.Unread < 0 || c.Unseen > c.Unread || c.Unread > 25 {
					errs <- fmt.Errorf("counts %+v", c)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	f := feeds[0]
	gs := rtAll(t, f, "alice", 4)
	if len(gs) != 25 {
		t.Errorf("%d groups, want 25", len(gs))
	}
	unseen, unread := int64(0), int64(0)
	for _, g := range gs {
		if !g.Seen {
			unseen++
		}
		if !g.Read {
			unread++
		}
		if g.Read && !g.Seen {
			t.Errorf("group %s read but not seen", g.ID)
		}
		if g.ActorCount > int64(len(distinct[g.Object])) || len(g.Actors) > 3 {
			t.Errorf("group %s: %d actors, listed %q; stream has %d distinct", g.ID, g.ActorCount, g.Actors, len(distinct[g.Object]))
		}
	}
	if c := rtCounts(t, f, "alice"); c != (notify.Counts{Unseen: unseen, Unread: unread}) {
		t.Errorf("Counts %+v, groups' flags {%d %d}", c, unseen, unread)
	}
	c, err := f.MarkRead(ctx, "alice")
	if err != nil || c != (notify.Counts{}) {
		t.Errorf("MarkRead(all) = %+v, %v", c, err)
	}
	// redelivering the whole stream changes nothing
	for _, a := range stream {
		if err := f.Add(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if c := rtCounts(t, f, "alice"); c != (notify.Counts{}) {
		t.Errorf("after redelivery of an applied stream: %+v, want {0 0}", c)
	}
}

// Wire form: "unknown, duplicated, missing or differently cased members
// refused, version WireVersion ..." → ErrBadMessage marked outbox.ErrPoison,
// nothing applied.
func TestRedTeamWirePoison(t *testing.T) {
	f, clk, _ := rtFeed(t, notify.Config{})
	ctx := context.Background()
	ms := clk.Now().UnixMilli()
	body := func(s string) []byte { return []byte(strings.ReplaceAll(s, "MS", fmt.Sprint(ms))) }
	bad := []string{
		`{"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS}`,
		`{"v":1,"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS}`,
		`{"V":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS}`,
		`{"v":1,"id":"p","Actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS}`,
		`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","TIME_MS":MS}`,
		`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","target":"carol","time_ms":MS}`,
		`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS,"time_ms":MS}`,
		`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS,"extra":null}`,
		`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS}garbage`,
		`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS}{}`,
		`{"v":"1","id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS}`,
		`{"v":1.0,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS}`,
		`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":"MS"}`,
		`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS.5}`,
		`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":null}`,
		`{"v":1,"id":null,"actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS}`,
		`{"v":1,"id":"p","actor":"b\u00f6b","verb":"like","object":"o","target":"alice","time_ms":MS}`,
		`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o\u0000","target":"alice","time_ms":MS}`,
		`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS,"\u0076":1}`,
		`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","tıme_ms":MS}`,
		`[{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":MS}]`,
		`null`, ``, `{}`,
	}
	for _, b := range bad {
		_, err := notify.Decode(body(b))
		if !errors.Is(err, notify.ErrBadMessage) || !errors.Is(err, outbox.ErrPoison) {
			t.Errorf("Decode(%s) = %v, want ErrBadMessage+ErrPoison", b, err)
		}
		err = f.Handle(ctx, []byte("alice"), body(b))
		if !errors.Is(err, outbox.ErrPoison) {
			t.Errorf("Handle(%s) = %v, want poison", b, err)
		}
	}
	if c := rtCounts(t, f, "alice"); c != (notify.Counts{}) {
		t.Errorf("poison applied something: %+v", c)
	}
	// Handle refuses times Add refuses, as poison
	for _, at := range []int64{ms + int64(notify.MaxSkew/time.Millisecond) + 1, ms - int64(72*time.Hour/time.Millisecond)} {
		b := fmt.Sprintf(`{"v":1,"id":"old","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":%d}`, at)
		if err := f.Handle(ctx, nil, []byte(b)); !errors.Is(err, outbox.ErrPoison) {
			t.Errorf("Handle(%s) = %v, want poison", b, err)
		}
	}
	// a good one round-trips and applies once
	a := notify.Activity{ID: "good", Actor: "bob", Verb: "like", Object: "o:{x}", Target: "alice", Time: time.UnixMilli(ms)}
	v, err := notify.Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	d, err := notify.Decode(v)
	if err != nil || d.ID != a.ID || d.Object != a.Object || !d.Time.Equal(a.Time) {
		t.Fatalf("Decode(Encode) = %+v, %v", d, err)
	}
	for range 3 {
		if err := f.Handle(ctx, nil, v); err != nil {
			t.Fatal(err)
		}
	}
	if c := rtCounts(t, f, "alice"); c != (notify.Counts{Unseen: 1, Unread: 1}) {
		t.Errorf("after 3 deliveries: %+v", c)
	}
}

// Same ID, same target, racing with different content from many goroutines:
// exactly one of them is applied.
func TestRedTeamForgedRedeliveryRace(t *testing.T) {
	f, clk, _ := rtFeed(t, notify.Config{})
	ctx := context.Background()
	now := clk.Now()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				a := notify.Activity{ID: fmt.Sprint("r", i), Actor: fmt.Sprint("a", w), Verb: "like", Object: fmt.Sprintf("o%d-%d", i, w%3), Target: "alice", Time: now}
				if err := f.Add(ctx, a); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	gs := rtAll(t, f, "alice", 100)
	var total int64
	for _, g := range gs {
		total += g.ActorCount
	}
	if total != 50 {
		t.Errorf("50 ids applied as %d actor-activities over %d groups", total, len(gs))
	}
}

// "Lowering it trims a user's feed to the new Cap at their next new group."
// "An activity that arrives for a group that was dropped starts it afresh."
// "an actor who acts twice counts once"; "the first MaxActors distinct
// actors in arrival order".
func TestRedTeamCapLoweredAndRestart(t *testing.T) {
	f, clk, r := rtFeed(t, notify.Config{Cap: 10, MaxActors: 2})
	ctx := context.Background()
	now := clk.Now()
	id := 0
	add := func(f *notify.Feed, actor, obj string) {
		t.Helper()
		id++
		if err := f.Add(ctx, notify.Activity{ID: fmt.Sprint("k", id), Actor: actor, Verb: "like", Object: obj, Target: "alice", Time: now}); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []string{"x", "y", "x", "z", "y", "w"} {
		add(f, a, "o0")
	}
	for i := 1; i < 10; i++ {
		add(f, "x", fmt.Sprint("o", i))
	}
	gs := rtAll(t, f, "alice", 100)
	for _, g := range gs {
		if g.Object == "o0" && (g.ActorCount != 4 || !slicesEqual(g.Actors, []string{"x", "y"})) {
			t.Errorf("o0: count %d actors %q, want 4 [x y]", g.ActorCount, g.Actors)
		}
	}
	small, err := notify.New(r.Client, notify.Config{Namespace: r.Namespace, Now: clk.Now, Cap: 3, MaxActors: 2})
	if err != nil {
		t.Fatal(err)
	}
	add(small, "q", "o5") // an update, not a new group
	add(small, "q", "new")
	gs = rtAll(t, small, "alice", 100)
	if len(gs) != 3 {
		t.Fatalf("after Cap lowered to 3 and a new group: %d groups", len(gs))
	}
	if gs[0].Object != "new" || gs[1].Object != "o5" || gs[2].Object != "o9" {
		t.Errorf("kept %s %s %s, want new o5 o9", gs[0].Object, gs[1].Object, gs[2].Object)
	}
	if c := rtCounts(t, small, "alice"); c.Unseen != 3 || c.Unread != 3 {
		t.Errorf("Counts after trim %+v, want {3 3}", c)
	}
	// o0 was dropped: it starts afresh
	add(small, "w", "o0")
	gs = rtAll(t, small, "alice", 100)
	if gs[0].Object != "o0" || gs[0].ActorCount != 1 || !slicesEqual(gs[0].Actors, []string{"w"}) {
		t.Errorf("restarted o0: %+v, want 1 actor [w]", gs[0])
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Config: "Window ... Between 1s and 366 days, and a whole number of
// milliseconds"; "Cap ... At most MaxCap"; "MaxActors ... At most 100";
// "DedupeTTL ... at least Window"; "ErrConfig is wrapped by every
// configuration error."
func TestRedTeamConfigLimits(t *testing.T) {
	r := testenv.NewRedis(t)
	bad := []notify.Config{
		{Window: time.Second - time.Millisecond},
		{Window: 1500 * time.Microsecond},
		{Window: time.Second + time.Microsecond},
		{Window: 367 * 24 * time.Hour},
		{Window: -time.Hour},
		{Cap: notify.MaxCap + 1},
		{Cap: -1},
		{MaxActors: 101},
		{MaxActors: -1},
		{Window: time.Hour, DedupeTTL: time.Hour - time.Millisecond},
		{DedupeTTL: -time.Hour},
	}
	for _, c := range bad {
		c.Namespace = r.Namespace
		if _, err := notify.New(r.Client, c); !errors.Is(err, notify.ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", c, err)
		}
	}
	good := []notify.Config{
		{Window: time.Second}, {Window: 366 * 24 * time.Hour}, {Cap: notify.MaxCap}, {MaxActors: 100},
		{Window: time.Hour, DedupeTTL: time.Hour},
	}
	for _, c := range good {
		c.Namespace = r.Namespace
		if _, err := notify.New(r.Client, c); err != nil {
			t.Errorf("New(%+v) = %v, want nil", c, err)
		}
	}
}

// "the earliest and latest activity times"; a late activity "still
// surfaces its group"; a Time picks its window, to the nanosecond.
func TestRedTeamFirstLastAndSubMillisecond(t *testing.T) {
	f, clk, _ := rtFeed(t, notify.Config{Window: time.Hour})
	ctx := context.Background()
	now := clk.Now()
	add := func(id string, obj string, at time.Time) {
		t.Helper()
		if err := f.Add(ctx, notify.Activity{ID: id, Actor: id, Verb: "like", Object: obj, Target: "alice", Time: at}); err != nil {
			t.Fatalf("Add(%s) = %v", id, err)
		}
	}
	base := now.Add(-time.Hour) // the previous window's start
	add("a", "x", base.Add(20*time.Minute))
	add("b", "y", base.Add(5*time.Minute))
	add("c", "x", base.Add(5*time.Minute)) // earlier than a, arrives later
	add("d", "x", base.Add(9*time.Minute))
	gs := rtAll(t, f, "alice", 10)
	if len(gs) != 2 || gs[0].Object != "x" {
		t.Fatalf("groups %+v, want x on top", gs)
	}
	if !gs[0].First.Equal(base.Add(5*time.Minute)) || !gs[0].Last.Equal(base.Add(20*time.Minute)) || gs[0].ActorCount != 3 {
		t.Errorf("x: first %v last %v n %d, want %v %v 3", gs[0].First, gs[0].Last, gs[0].ActorCount, base.Add(5*time.Minute), base.Add(20*time.Minute))
	}
	// 500 µs before a window start is in the window before
	add("e", "z", now.Add(-time.Millisecond))
	add("f", "z", now.Add(-500*time.Microsecond))
	add("g", "z", now)
	n := 0
	for _, g := range rtAll(t, f, "alice", 10) {
		if g.Object == "z" {
			n++
			if g.First.After(g.Last) {
				t.Errorf("z group first %v after last %v", g.First, g.Last)
			}
			if len(g.Actors) == 2 && !(g.Actors[0] == "e" && g.Actors[1] == "f") {
				t.Errorf("z group %q: f (at -500µs) joined the window of g (at the start)", g.Actors)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d z groups, want 2", n)
	}
}

// Add "refuses ... a Time more than MaxSkew ahead of Now or older than
// DedupeTTL": a Time exactly DedupeTTL old is not older than DedupeTTL.
func TestRedTeamAgeBoundaryExact(t *testing.T) {
	f, clk, _ := rtFeed(t, notify.Config{Window: time.Hour, DedupeTTL: 2 * time.Hour})
	now := clk.Now()
	a := notify.Activity{ID: "edge", Actor: "bob", Verb: "like", Object: "o", Target: "alice", Time: now.Add(-2 * time.Hour)}
	if err := f.Add(context.Background(), a); err != nil {
		t.Errorf("Add at exactly Now-DedupeTTL = %v, want nil (only older is refused)", err)
	}
}
