package notify_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/feed/notify"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type fixture struct {
	t   *testing.T
	f   *notify.Feed
	r   *testenv.Redis
	clk *testenv.Clock
	ctx context.Context
	cfg notify.Config
}

func newFixture(t *testing.T, r *testenv.Redis, cfg notify.Config) *fixture {
	t.Helper()
	clk := testenv.NewClock(testenv.Now().UTC().Truncate(time.Hour))
	cfg.Namespace, cfg.Now = r.Namespace, clk.Now
	f, err := notify.New(r.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &fixture{t: t, f: f, r: r, clk: clk, ctx: context.Background(), cfg: cfg}
}

func (x *fixture) all(user string, n int) []notify.Group {
	x.t.Helper()
	var out []notify.Group
	cursor := ""
	for {
		p, err := x.f.Groups(x.ctx, user, cursor, n)
		if err != nil {
			x.t.Fatal(err)
		}
		out = append(out, p.Groups...)
		if p.Next == "" {
			return out
		}
		cursor = p.Next
	}
}

func (x *fixture) counts(user string) notify.Counts {
	x.t.Helper()
	c, err := x.f.Counts(x.ctx, user)
	if err != nil {
		x.t.Fatal(err)
	}
	return c
}

// model is the specification: what a user's feed must hold.
type model struct {
	window, dedupe time.Duration
	cap, maxActors int
	seen           map[string]bool // activity ids applied, per target
	users          map[string]*userModel
	// what the run exercised
	dropped, duplicates, refusals int
}

type userModel struct {
	seq    int64
	groups map[string]*groupModel
}

type groupModel struct {
	notify.Group
	seq      int64
	distinct map[string]bool
}

func newModel(cfg notify.Config) *model {
	return &model{window: cfg.Window, dedupe: cfg.DedupeTTL, cap: cfg.Cap, maxActors: cfg.MaxActors,
		seen: map[string]bool{}, users: map[string]*userModel{}}
}

func (m *model) user(u string) *userModel {
	if m.users[u] == nil {
		m.users[u] = &userModel{groups: map[string]*groupModel{}}
	}
	return m.users[u]
}

// add applies a at now; it reports whether Add must refuse it.
func (m *model) add(now time.Time, a notify.Activity) (refused bool) {
	if a.Time.After(now.Add(notify.MaxSkew)) || a.Time.Before(now.Add(-m.dedupe)) {
		m.refusals++
		return true
	}
	if m.seen[a.Target+"\n"+a.ID] {
		m.duplicates++
		return false
	}
	m.seen[a.Target+"\n"+a.ID] = true
	u := m.user(a.Target)
	ms := a.Time.UnixMilli()
	gid := fmt.Sprintf("%d:%s:%s", ms/m.window.Milliseconds(), a.Verb, a.Object)
	g := u.groups[gid]
	if g == nil {
		for len(u.groups) >= m.cap {
			var oldest *groupModel
			for _, o := range u.groups {
				if oldest == nil || o.seq < oldest.seq {
					oldest = o
				}
			}
			delete(u.groups, oldest.ID)
			m.dropped++
		}
		t := time.UnixMilli(ms).UTC()
		g = &groupModel{Group: notify.Group{ID: gid, Verb: a.Verb, Object: a.Object, First: t, Last: t}, distinct: map[string]bool{}}
		u.groups[gid] = g
	}
	if !g.distinct[a.Actor] {
		g.distinct[a.Actor] = true
		g.ActorCount++
		if len(g.Actors) < m.maxActors {
			g.Actors = append(g.Actors, a.Actor)
		}
	}
	t := time.UnixMilli(ms).UTC()
	if t.Before(g.First) {
		g.First = t
	}
	if t.After(g.Last) {
		g.Last = t
	}
	u.seq++
	g.seq, g.Seen, g.Read = u.seq, false, false
	return false
}

func (m *model) mark(user string, read bool, ids []string) notify.Counts {
	u := m.user(user)
	for _, g := range u.groups {
		if len(ids) == 0 || slices.Contains(ids, g.ID) {
			g.Seen = true
			g.Read = g.Read || read
		}
	}
	return m.counts(user)
}

func (m *model) counts(user string) notify.Counts {
	var c notify.Counts
	for _, g := range m.user(user).groups {
		if !g.Seen {
			c.Unseen++
		}
		if !g.Read {
			c.Unread++
		}
	}
	return c
}

func (m *model) groups(user string) []notify.Group {
	gs := slices.Collect(maps.Values(m.user(user).groups))
	sort.Slice(gs, func(i, j int) bool { return gs[i].seq > gs[j].seq })
	out := make([]notify.Group, len(gs))
	for i, g := range gs {
		out[i] = g.Group
	}
	return out
}

func sameGroups(t *testing.T, what string, got, want []notify.Group) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d groups, want %d:\n got %+v\nwant %+v", what, len(got), len(want), got, want)
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Verb != w.Verb || g.Object != w.Object || g.ActorCount != w.ActorCount || !slices.Equal(g.Actors, w.Actors) ||
			!g.First.Equal(w.First) || !g.Last.Equal(w.Last) || g.Seen != w.Seen || g.Read != w.Read {
			t.Fatalf("%s: group %d is\n %+v, want\n %+v", what, i, g, w)
		}
	}
}

// TestModel: random activities (redeliveries, repeated actors, several
// verbs and objects, times crossing windows, some too old or too new) and
// random MarkSeen/MarkRead, on two users, compared after every step with
// the model: groups, order, actors, times, flags, counts, cap.
func TestModel(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		cfg := notify.Config{Window: time.Hour, Cap: 6, MaxActors: 3}
		x := newFixture(t, r, cfg)
		m := newModel(notify.Config{Window: time.Hour, Cap: 6, MaxActors: 3, DedupeTTL: 2 * time.Hour})
		rng := rand.New(rand.NewPCG(27, 3))
		users := []string{"alice", "bob:1"}
		var sent []notify.Activity
		for step := range 600 {
			user := users[rng.IntN(len(users))]
			switch k := rng.IntN(10); {
			case k < 6:
				var a notify.Activity
				if len(sent) > 0 && rng.IntN(4) == 0 {
					a = sent[rng.IntN(len(sent))] // a redelivery
				} else {
					a = notify.Activity{ID: fmt.Sprintf("a%d", step), Actor: fmt.Sprintf("u%d", rng.IntN(5)),
						Verb: []string{"like", "comment", "follow_1"}[rng.IntN(3)], Object: fmt.Sprintf("post:%d", rng.IntN(3)),
						Target: user, Time: x.clk.Now().Add(-time.Duration(rng.IntN(40)) * time.Minute)}
					if rng.IntN(30) == 0 {
						a.Time = x.clk.Now().Add(time.Duration(rng.IntN(30)) * time.Minute) // beyond MaxSkew sometimes
					}
					sent = append(sent, a)
				}
				refused := m.add(x.clk.Now(), a)
				err := x.f.Add(x.ctx, a)
				if refused != errors.Is(err, notify.ErrInvalid) || (!refused && err != nil) {
					t.Fatalf("step %d: Add(%+v) = %v, model refuses: %v", step, a, err, refused)
				}
				user = a.Target
			case k < 8:
				read := k == 7
				var ids []string
				if rng.IntN(3) > 0 {
					for _, g := range m.groups(user) {
						if rng.IntN(2) == 0 {
							ids = append(ids, g.ID)
						}
					}
					ids = append(ids, "1:like:nothing") // no such group: ignored
				}
				want := m.mark(user, read, ids)
				mark := x.f.MarkSeen
				if read {
					mark = x.f.MarkRead
				}
				got, err := mark(x.ctx, user, ids...)
				if err != nil || got != want {
					t.Fatalf("step %d: mark(read %v, %v) = %+v, %v; want %+v", step, read, ids, got, err, want)
				}
			default:
				x.clk.Add(time.Duration(rng.IntN(25)) * time.Minute)
			}
			if got, want := x.counts(user), m.counts(user); got != want {
				t.Fatalf("step %d: counts %+v, want %+v", step, got, want)
			}
			sameGroups(t, fmt.Sprintf("step %d", step), x.all(user, 1+rng.IntN(4)), m.groups(user))
		}
		if m.dropped < 10 || m.duplicates < 10 || m.refusals < 5 {
			t.Fatalf("the run dropped %d groups, saw %d redeliveries and %d refusals: too few to mean much", m.dropped, m.duplicates, m.refusals)
		}
	})
}

// TestExactlyOnceConcurrent: two Feeds (two processes) and many goroutines
// apply the same stream of activities, each several times, at once. Every
// activity is applied once: the update counter equals the distinct ids,
// and the groups hold what one application makes (order-free fields: the
// order of a concurrent run is the order the scripts ran in).
func TestExactlyOnceConcurrent(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		cfg := notify.Config{Window: time.Hour, Cap: 1000, MaxActors: 100}
		x := newFixture(t, r, cfg)
		other, err := notify.New(r.Client, x.cfg)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		var stream []notify.Activity
		for i := range 300 {
			stream = append(stream, notify.Activity{ID: fmt.Sprintf("id-%d", i), Actor: fmt.Sprintf("u%d", rng.IntN(20)),
				Verb: "like", Object: fmt.Sprintf("post:%d", rng.IntN(4)), Target: "carol",
				Time: x.clk.Now().Add(-time.Duration(rng.IntN(90)) * time.Minute)})
		}
		m := newModel(notify.Config{Window: time.Hour, Cap: 1000, MaxActors: 100, DedupeTTL: 2 * time.Hour})
		for _, a := range stream {
			m.add(x.clk.Now(), a)
		}
		var wg sync.WaitGroup
		for w := range 8 {
			f := []*notify.Feed{x.f, other}[w%2]
			order := slices.Clone(stream)
			rand.New(rand.NewPCG(uint64(w), 9)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			wg.Go(func() {
				for _, a := range order {
					if err := f.Add(x.ctx, a); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if n, err := r.Client.Get(x.ctx, x.f.SeqKey("carol")).Int64(); err != nil || n != int64(len(stream)) {
			t.Fatalf("update counter %d, %v; want %d (one per activity)", n, err, len(stream))
		}
		got := x.all("carol", 7)
		want := m.groups("carol")
		byID := func(gs []notify.Group) []notify.Group {
			gs = slices.Clone(gs)
			sort.Slice(gs, func(i, j int) bool { return gs[i].ID < gs[j].ID })
			for i := range gs {
				gs[i].Actors = slices.Sorted(slices.Values(gs[i].Actors))
			}
			return gs
		}
		sameGroups(t, "after the concurrent run", byID(got), byID(want))
		if c := x.counts("carol"); c != (notify.Counts{Unseen: int64(len(want)), Unread: int64(len(want))}) {
			t.Fatalf("counts %+v, want %d unseen and unread", c, len(want))
		}
	})
}
