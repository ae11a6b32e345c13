package signin_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/signin"
)

// The same sign-ins and make-ups, from December of y0 into the leap year
// y0+2, give the same results on both layouts — every Result, error, status,
// streak, history and month count — and a Bitmaps backup restored into a
// Packed namespace reads back the same days.
func TestLayoutsAgree(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		clk := &testenv.Clock{}
		services := map[signin.Layout]*signin.Service{}
		for _, l := range layouts {
			s, err := signin.New(r.Client, signin.Config{Namespace: r.Namespace + ":" + l.String(), Now: clk.Now, Buckets: 4, Layout: l, Users: 100})
			if err != nil {
				t.Fatal(err)
			}
			services[l] = s
		}
		users := []string{"steady", "r1", "r2{x}"}
		// both runs op on each layout and fails unless the answers agree.
		both := func(what string, op func(s *signin.Service) any) {
			t.Helper()
			a, b := op(services[signin.Bitmaps]), op(services[signin.Packed])
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("%s: bitmaps %v, packed %v", what, a, b)
			}
		}
		for _, u := range users {
			both("cards", func(s *signin.Service) any { return s.AddCards(ctx, u, 100) })
		}
		rng := rand.New(rand.NewPCG(1, 2))
		first, last := day(y0, 12, 20), day(y0+2, 1, 10)
		for d := first; !last.Before(d); d = d.AddDays(1) {
			clk.Set(noon(d))
			for _, u := range users {
				if u == "steady" || rng.IntN(10) < 6 {
					both("sign "+u+" "+d.String(), func(s *signin.Service) any { return fmt.Sprint(s.Sign(ctx, u, clk.Now())) })
				}
				if u != "steady" && rng.IntN(10) == 0 {
					missed := d.AddDays(-1 - rng.IntN(8)) // sometimes outside the window
					both("make up "+u+" "+missed.String(), func(s *signin.Service) any { return fmt.Sprint(s.MakeUp(ctx, u, missed)) })
				}
				both("streak "+u+" "+d.String(), func(s *signin.Service) any { return fmt.Sprint(s.Streak(ctx, u, clk.Now())) })
				both("status "+u+" "+d.String(), func(s *signin.Service) any { return fmt.Sprint(s.Status(ctx, u, d.AddDays(-1))) })
			}
		}
		for _, u := range users {
			both("history "+u, func(s *signin.Service) any { return fmt.Sprint(s.History(ctx, u, first, last)) })
			for m := time.January; m <= time.December; m++ {
				both(fmt.Sprint("month count ", u, m), func(s *signin.Service) any { return fmt.Sprint(s.MonthCount(ctx, u, y0+1, m)) })
			}
		}
		if st, _ := services[signin.Packed].Streak(ctx, "steady", clk.Now()); st != daysFrom(first, last) {
			t.Fatalf("steady's streak %d across two year ends, want %d", st, daysFrom(first, last))
		}

		// Migration: Bitmaps → SQL → a new Packed namespace.
		_, db := newLedger(t)
		moved, err := signin.New(r.Client, signin.Config{Namespace: r.Namespace + ":moved", Now: clk.Now, Buckets: 4, Layout: signin.Packed, Users: 100})
		if err != nil {
			t.Fatal(err)
		}
		for m := time.January; m <= time.December; m++ {
			saved, err := services[signin.Bitmaps].Backup(ctx, db, y0+1, m)
			if err != nil || saved != len(users) {
				t.Fatalf("backup of %s saved %d users: %v", m, saved, err)
			}
			if restored, err := moved.Restore(ctx, db, y0+1, m); err != nil || restored != saved {
				t.Fatalf("restore of %s: %d users, %v", m, restored, err)
			}
		}
		for _, u := range users {
			want, _ := services[signin.Bitmaps].History(ctx, u, day(y0+1, 1, 1), day(y0+1, 12, 31))
			got, err := moved.History(ctx, u, day(y0+1, 1, 1), day(y0+1, 12, 31))
			if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s after migration: %v (%v), want %v", u, got, err, want)
			}
		}
	})
}

func daysFrom(from, to signin.Date) int {
	n := 1
	for d := from; d != to; d = d.AddDays(1) {
		n++
	}
	return n
}

// A Service opened on data of another layout — or Packed with another Users
// sizing — refuses every call with ErrLayout and writes nothing, rather
// than reading an empty history.
func TestLayoutMismatchRefused(t *testing.T) {
	for _, first := range layouts {
		t.Run(first.String()+"-first", func(t *testing.T) {
			ctx := context.Background()
			r := testenv.NewRedis(t)
			clk := &testenv.Clock{}
			clk.Set(noon(day(y0, 11, 30)))
			owner := newService(t, r, clk, signin.Config{Buckets: 1, Layout: first})
			if _, err := owner.Sign(ctx, "ann", clk.Now()); err != nil {
				t.Fatal(err)
			}
			if err := owner.AddCards(ctx, "ann", 1); err != nil {
				t.Fatal(err)
			}
			_, db := newLedger(t)
			if _, err := owner.Backup(ctx, db, y0, time.November); err != nil {
				t.Fatal(err)
			}
			others := []signin.Config{{Buckets: 1, Layout: signin.Bitmaps}, {Buckets: 1, Layout: signin.Packed, Users: 1000}, {Buckets: 1, Layout: signin.Packed, Users: 100000}}
			for _, cfg := range others {
				if cfg.Layout == first && cfg.Users == 1000 || cfg.Layout == first && first == signin.Bitmaps {
					continue // the owner's own layout
				}
				s := newService(t, r, clk, cfg)
				before, _ := r.Client.Keys(ctx, r.Namespace+"*").Result()
				calls := map[string]error{}
				_, calls["Sign"] = s.Sign(ctx, "bo", clk.Now())
				_, calls["MakeUp"] = s.MakeUp(ctx, "ann", day(y0, 11, 29))
				_, calls["Status"] = s.Status(ctx, "ann", day(y0, 11, 30))
				_, calls["History"] = s.History(ctx, "ann", day(y0, 11, 1), day(y0, 11, 30))
				_, calls["Streak"] = s.Streak(ctx, "ann", clk.Now())
				_, calls["MonthCount"] = s.MonthCount(ctx, "ann", y0, time.November)
				_, calls["Backup"] = s.Backup(ctx, db, y0, time.November)
				_, calls["Restore"] = s.Restore(ctx, db, y0, time.November)
				for call, err := range calls {
					if !errors.Is(err, signin.ErrLayout) {
						t.Errorf("%v Users %d on %v data: %s: %v, want ErrLayout", cfg.Layout, cfg.Users, first, call, err)
					}
				}
				after, _ := r.Client.Keys(ctx, r.Namespace+"*").Result()
				if len(after) != len(before) {
					t.Fatalf("refused calls changed the keys %v → %v", before, after)
				}
			}
			if ok, err := owner.Status(ctx, "ann", day(y0, 11, 30)); !ok || err != nil {
				t.Fatalf("the owner's data after refused calls: %v %v", ok, err)
			}
		})
	}
}

// A sign-in or make-up whose reply is lost is sent again by go-redis: the
// second run finds the day signed and records nothing, so the rewards and
// the card are counted once.
func TestRetriedSignAppliedOnce(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		ctx := context.Background()
		r, proxy := testenv.NewFaultyRedis(t)
		clk := &testenv.Clock{}
		clk.Set(noon(day(y0, 11, 30)))
		s := newService(t, r, clk, signin.Config{Buckets: 2, Layout: l})
		if _, err := s.Sign(ctx, "warm", clk.Now()); err != nil { // loads the script
			t.Fatal(err)
		}
		s.AddCards(ctx, "ann", 1)
		proxy.DropReplies(1)
		res, err := s.Sign(ctx, "ann", clk.Now())
		if err != nil || proxy.Cuts() != 1 {
			t.Fatalf("sign with a lost reply: %+v, %v, %d cuts", res, err, proxy.Cuts())
		}
		// The retry reports the day as signed (by the lost first run).
		if !res.AlreadySigned || res.Streak != 1 || res.Points != 0 {
			t.Fatalf("retried sign: %+v", res)
		}
		proxy.DropReplies(1)
		if _, err := s.MakeUp(ctx, "ann", day(y0, 11, 29)); !errors.Is(err, signin.ErrAlreadySigned) || proxy.Cuts() != 2 {
			t.Fatalf("make-up with a lost reply: %v, %d cuts; want the retry to find the day made up", err, proxy.Cuts())
		}
		if entries := outboxEntries(t, r, s); entries != 3 {
			t.Fatalf("%d reward tasks, want 3 (warm, ann's day, ann's made-up day)", entries)
		}
		if _, err := s.MakeUp(ctx, "ann", day(y0, 11, 28)); !errors.Is(err, signin.ErrNoCard) {
			t.Fatalf("the one card was spent twice or not at all: %v", err)
		}
		clk.Set(noon(day(y0, 12, 1)))
		if res, err := s.Sign(ctx, "ann", clk.Now()); err != nil || res.Streak != 3 || res.Points != 10 {
			t.Fatalf("next day: %+v, %v; want streak 3", res, err)
		}
	})
}

func outboxEntries(t testing.TB, r *testenv.Redis, s *signin.Service) int64 {
	t.Helper()
	var n int64
	for _, key := range s.Outboxes() {
		l, err := r.Client.XLen(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		n += l
	}
	return n
}

// 1,000 users signed into a leap year (y0+2) through 31 December cost at
// most 64 bytes per user-year in the Packed layout, by Redis' own MEMORY
// USAGE of every key left once the relay has drained the outboxes, and their
// streak state (current, longest, total, freezes) at most 48 bytes per user
// more. A packed user-year costs its field's length, set by its last day,
// not by how many days are set: the test signs every 28th day (signing all
// 366 measured the same 60.5 bytes, in twelve times the time). Every hash
// must still be a listpack (under the spawned server's default
// hash-max-listpack-entries).
func TestPackedMemory(t *testing.T) {
	r := testenv.NewRedis(t)
	if r.Kind == devstack.Miniredis {
		t.Skip("miniredis has no MEMORY USAGE")
	}
	s := newService(t, r, &testenv.Clock{}, signin.Config{Buckets: 8, Layout: signin.Packed, Users: 1000})
	users := numberedUsers(1000)
	signYear(t, s, users, y0+2, 28)
	m := measureMemory(t, r, r.Namespace, s)
	perUser, perState := float64(m.years)/float64(len(users)), float64(m.state)/float64(len(users))
	t.Logf("packed: %.1f bytes per user-year, %.1f per user's state; encodings %v", perUser, perState, m.encodings)
	if perUser > 64 || perState > 48 {
		t.Fatalf("%.1f bytes per user-year and %.1f per state, want at most 64 and 48", perUser, perState)
	}
	if len(m.encodings) != 2 || m.encodings["listpack"] == 0 {
		t.Fatalf("key encodings %v: every hash should be a listpack", m.encodings)
	}
}

// numberedUsers are n ids shaped like a service's numeric user ids.
func numberedUsers(n int) []string {
	users := make([]string, n)
	for i := range users {
		users[i] = fmt.Sprint(10_000_000 + i*7919)
	}
	return users
}

// signYear signs every user in on 1 January, every step-th day after it
// and 31 December of year, users in parallel.
func signYear(tb testing.TB, s *signin.Service, users []string, year, step int) {
	tb.Helper()
	ctx := context.Background()
	var days []time.Time
	last := time.Date(year, 12, 31, 12, 0, 0, 0, time.UTC)
	for d := time.Date(year, 1, 1, 12, 0, 0, 0, time.UTC); d.Before(last); d = d.AddDate(0, 0, step) {
		days = append(days, d)
	}
	days = append(days, last)
	work := make(chan string)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for u := range work {
				for _, d := range days {
					if _, err := s.Sign(ctx, u, d); err != nil {
						tb.Error(err)
						return
					}
				}
			}
		})
	}
	for _, u := range users {
		work <- u
	}
	close(work)
	wg.Wait()
}

// memory is what Redis spends on a namespace's keys (MEMORY USAGE): the
// user-years and the rest (layout keys), and the users' streak state.
type memory struct {
	years, state int64
	encodings    map[string]int
}

// measureMemory deletes s's outbox streams (as the relay would) and sums
// the MEMORY USAGE of every key left in namespace ns, state keys apart; it
// also counts the keys' encodings.
func measureMemory(tb testing.TB, r *testenv.Redis, ns string, s *signin.Service) memory {
	tb.Helper()
	ctx := context.Background()
	for _, key := range s.Outboxes() {
		r.Client.Del(ctx, key)
	}
	m := memory{encodings: map[string]int{}}
	names, err := testenv.ScanKeys(ctx, r.Client, ns+"*")
	if err != nil {
		tb.Fatal(err)
	}
	for _, name := range names {
		n, err := r.Client.MemoryUsage(ctx, name, 0).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			tb.Fatal(err)
		}
		if strings.Contains(name, "}:ps:") || strings.Contains(name, "}:st:") {
			m.state += n
		} else {
			m.years += n
		}
		enc, _ := r.Client.ObjectEncoding(ctx, name).Result()
		m.encodings[enc]++
	}
	return m
}
