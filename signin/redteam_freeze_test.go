package signin_test

// Red-team black-box tests of DayStart, streak freezes, Stats and DayOf,
// written from the godoc only (go doc -all ./signin). Each assertion cites
// the documentation sentence it relies on.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/signin"
)

// ---------------------------------------------------------------- helpers

func rtYear() int { return testenv.Now().Year() + 1 }

// rtNew opens a Service on r's namespace with cfg (Namespace, Layout, Users
// and Now filled in).
func rtNew(t *testing.T, r *testenv.Redis, l signin.Layout, clk *testenv.Clock, cfg signin.Config) *signin.Service {
	t.Helper()
	cfg.Namespace = r.Namespace
	cfg.Layout = l
	if l == signin.Packed && cfg.Users == 0 {
		cfg.Users = 1000
	}
	if clk != nil {
		cfg.Now = clk.Now
	}
	s, err := signin.New(r.Client, cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return s
}

func rtDates(from signin.Date, offs ...int) []signin.Date {
	out := []signin.Date{}
	for _, o := range offs {
		out = append(out, from.AddDays(o))
	}
	return out
}

func rtEq(a, b []signin.Date) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

func rtSign(t *testing.T, s *signin.Service, user string, at time.Time) signin.Result {
	t.Helper()
	res, err := s.Sign(context.Background(), user, at)
	if err != nil {
		t.Fatalf("Sign(%s, %v): %v", user, at, err)
	}
	return res
}

func rtStats(t *testing.T, s *signin.Service, user string) signin.Stats {
	t.Helper()
	st, err := s.Stats(context.Background(), user)
	if err != nil {
		t.Fatalf("Stats(%s): %v", user, err)
	}
	return st
}

func rtAdd(t *testing.T, s *signin.Service, user string, n int, grant string) int {
	t.Helper()
	held, err := s.AddFreezes(context.Background(), user, n, grant)
	if err != nil {
		t.Fatalf("AddFreezes(%s, %d, %q): %v", user, n, grant, err)
	}
	return held
}

// rtTransition finds the first instant of year y at which loc's UTC offset
// goes up (forward=true: summer time begins) or down, exact to the nanosecond.
func rtTransition(t *testing.T, loc *time.Location, y int, forward bool) time.Time {
	t.Helper()
	at := time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC)
	end := at.AddDate(1, 0, 0)
	_, off := at.In(loc).Zone()
	for at.Before(end) {
		next := at.Add(time.Hour)
		_, noff := next.In(loc).Zone()
		if noff != off {
			if (noff > off) == forward {
				lo, hi := at, next // offset(lo)==off, offset(hi)==noff
				for hi.Sub(lo) > time.Nanosecond {
					mid := lo.Add(hi.Sub(lo) / 2)
					if _, o := mid.In(loc).Zone(); o == off {
						lo = mid
					} else {
						hi = mid
					}
				}
				return hi
			}
			off = noff
		}
		at = next
	}
	t.Fatalf("no transition in %s %d forward=%v", loc, y, forward)
	return time.Time{}
}

func rtLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("no zone %s: %v", name, err)
	}
	return loc
}

// ---------------------------------------------------------------- retries

// A retried Sign after a gap: the retry answers AlreadySigned, grants nothing
// and spends no freeze twice.
//
// godoc Sign: "signing the same day again changes nothing and grants nothing
// (so a sign-in go-redis resends after a lost reply is recorded once, answers
// AlreadySigned, and spends no freeze twice)".
// godoc Result.Frozen: "(a retry whose first run froze them reports none)".
func TestRedTeamRetriedSignAfterGap(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.March, Day: 10}
		clk := testenv.NewClock(noon(d0))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 3})
		rtAdd(t, s, "u", 3, "g1")
		rtSign(t, s, "u", clk.Now())
		clk.Set(noon(d0.AddDays(3))) // d0+1, d0+2 missed
		first := rtSign(t, s, "u", clk.Now())
		if first.AlreadySigned || first.Points != 10 || first.Streak != 2 || !rtEq(first.Frozen, rtDates(d0, 1, 2)) {
			t.Errorf("first sign: %+v, want Streak 2 Points 10 Frozen [%v %v]", first, d0.AddDays(1), d0.AddDays(2))
		}
		second := rtSign(t, s, "u", clk.Now())
		if !second.AlreadySigned || second.Points != 0 || len(second.Frozen) != 0 || second.Streak != 2 {
			t.Errorf("retried sign: %+v, want AlreadySigned, Points 0, no Frozen, Streak 2", second)
		}
		st := rtStats(t, s, "u")
		want := signin.Stats{Current: 2, Longest: 2, Total: 2, Freezes: 1, FrozenDays: 2}
		if st != want {
			t.Errorf("Stats after retry = %+v, want %+v", st, want)
		}
	})
}

// The same, but the reply is really lost and go-redis resends the script.
//
// godoc package: "Signing a day already signed changes nothing, so a sign-in
// go-redis resends after a lost reply is recorded once."
// godoc AddFreezes: "a retried call — by go-redis after a lost reply, or by the
// caller — adds once."
func TestRedTeamLostReplySignAndAddFreezes(t *testing.T) {
	r, proxy := testenv.NewFaultyRedis(t)
	d0 := signin.Date{Year: rtYear(), Month: time.April, Day: 3}
	clk := testenv.NewClock(noon(d0))
	s := rtNew(t, r, signin.Bitmaps, clk, signin.Config{MaxFreezes: 5})
	ctx := context.Background()
	// warm every script once on another user (so the retried command is the
	// same EVALSHA).
	rtAdd(t, s, "warm", 1, "w")
	rtSign(t, s, "warm", clk.Now())
	rtStats(t, s, "warm")

	proxy.DropReplies(1)
	held, err := s.AddFreezes(ctx, "u", 2, "order-1")
	if err != nil {
		t.Fatalf("AddFreezes through a lost reply: %v", err)
	}
	if proxy.Cuts() == 0 {
		t.Fatalf("the fault was not felt")
	}
	if held != 2 {
		t.Errorf("AddFreezes after a lost reply holds %d, want 2 (adds once)", held)
	}
	if st := rtStats(t, s, "u"); st.Freezes != 2 {
		t.Errorf("Stats.Freezes = %d after a lost reply, want 2", st.Freezes)
	}

	rtSign(t, s, "u", clk.Now())
	clk.Set(noon(d0.AddDays(2))) // d0+1 missed: one freeze
	cuts := proxy.Cuts()
	proxy.DropReplies(1)
	res, err := s.Sign(ctx, "u", clk.Now())
	if err != nil {
		t.Fatalf("Sign through a lost reply: %v", err)
	}
	if proxy.Cuts() == cuts {
		t.Fatalf("the fault was not felt")
	}
	if !res.AlreadySigned || res.Points != 0 || len(res.Frozen) != 0 {
		t.Errorf("resent Sign answered %+v, want AlreadySigned, Points 0, no Frozen", res)
	}
	want := signin.Stats{Current: 2, Longest: 2, Total: 2, Freezes: 1, FrozenDays: 1}
	if st := rtStats(t, s, "u"); st != want {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
	fd, err := s.FrozenDays(ctx, "u", d0, d0.AddDays(5))
	if err != nil || !rtEq(fd, rtDates(d0, 1)) {
		t.Errorf("FrozenDays = %v, %v; want [%v]", fd, err, d0.AddDays(1))
	}
}

// godoc AddFreezes: "a grant id seen in the last 30 days adds nothing, so a
// retried call ... adds once", and returns "how many the user holds".
// The example grant id "welcome-bonus" is one every user gets: the id is the
// user's grant, not a global one.
func TestRedTeamAddFreezesRetriedAndPerUser(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		clk := testenv.NewClock(noon(signin.Date{Year: rtYear(), Month: time.May, Day: 1}))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 5})
		if got := rtAdd(t, s, "a", 2, "welcome-bonus"); got != 2 {
			t.Errorf("first grant holds %d, want 2", got)
		}
		if got := rtAdd(t, s, "a", 2, "welcome-bonus"); got != 2 {
			t.Errorf("retried grant holds %d, want 2 (adds nothing)", got)
		}
		if got := rtAdd(t, s, "a", 3, "welcome-bonus"); got != 2 {
			t.Errorf("retried grant with another n holds %d, want 2 (id seen adds nothing)", got)
		}
		if got := rtAdd(t, s, "b", 2, "welcome-bonus"); got != 2 {
			t.Errorf("user b's own welcome-bonus holds %d, want 2", got)
		}
		clk.Add(29 * 24 * time.Hour)
		if got := rtAdd(t, s, "a", 2, "welcome-bonus"); got != 2 {
			t.Errorf("grant repeated 29 days later holds %d, want 2", got)
		}
		if st := rtStats(t, s, "a"); st.Freezes != 2 {
			t.Errorf("Stats.Freezes = %d, want 2", st.Freezes)
		}
	})
}

// Many goroutines sign the same day after a gap: one records it, every freeze
// is spent once and reported once.
//
// godoc Sign / Result.Frozen (as above); package: "Sign sets the day's bit,
// updates the streak state, spends the freezes a gap takes and records the
// reward tasks in one Lua script".
func TestRedTeamConcurrentSignsAfterGap(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.June, Day: 1}
		clk := testenv.NewClock(noon(d0))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 3})
		rtAdd(t, s, "u", 3, "g")
		rtSign(t, s, "u", clk.Now())
		clk.Set(noon(d0.AddDays(3)))
		const n = 32
		var wg sync.WaitGroup
		results := make([]signin.Result, n)
		errs := make([]error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				results[i], errs[i] = s.Sign(context.Background(), "u", clk.Now())
			}(i)
		}
		wg.Wait()
		fresh := 0
		var frozen []signin.Date
		for i, res := range results {
			if errs[i] != nil {
				t.Fatalf("Sign %d: %v", i, errs[i])
			}
			if !res.AlreadySigned {
				fresh++
			}
			frozen = append(frozen, res.Frozen...)
		}
		if fresh != 1 {
			t.Errorf("%d concurrent signs recorded the day, want 1", fresh)
		}
		if !rtEq(frozen, rtDates(d0, 1, 2)) {
			t.Errorf("frozen days reported by all calls = %v, want each of d+1,d+2 once", frozen)
		}
		want := signin.Stats{Current: 2, Longest: 2, Total: 2, Freezes: 1, FrozenDays: 2}
		if st := rtStats(t, s, "u"); st != want {
			t.Errorf("Stats = %+v, want %+v", st, want)
		}
	})
}

// Concurrent AddFreezes: one grant id from many goroutines adds once; many
// ids never raise the balance past MaxFreezes.
//
// godoc AddFreezes: "gives user n freezes, up to Config.MaxFreezes (the excess
// is lost), and returns how many the user holds ... a grant id seen ... adds
// nothing"; Config.MaxFreezes: "AddFreezes never raises a balance past it".
func TestRedTeamConcurrentAddFreezes(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		clk := testenv.NewClock(noon(signin.Date{Year: rtYear(), Month: time.July, Day: 7}))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 4})
		const n = 32
		run := func(grant func(i int) string) []int {
			var wg sync.WaitGroup
			out := make([]int, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					h, err := s.AddFreezes(context.Background(), "u", 1, grant(i))
					if err != nil {
						t.Errorf("AddFreezes: %v", err)
					}
					out[i] = h
				}(i)
			}
			wg.Wait()
			return out
		}
		same := run(func(int) string { return "one-order" })
		for i, h := range same {
			if h != 1 {
				t.Errorf("call %d with the same grant returned %d, want 1", i, h)
			}
		}
		many := run(func(i int) string { return fmt.Sprintf("order-%d", i) })
		for i, h := range many {
			if h < 1 || h > 4 {
				t.Errorf("call %d returned %d, outside 1..MaxFreezes", i, h)
			}
		}
		if st := rtStats(t, s, "u"); st.Freezes != 4 {
			t.Errorf("Stats.Freezes = %d, want 4 (the cap)", st.Freezes)
		}
	})
}

// Concurrent Sign, ApplyFreezes, AddFreezes (fresh grants) and Stats right
// after a gap: freezes granted today never cover yesterday, each frozen day is
// reported once.
//
// godoc AddFreezes: "The days before today are settled first with the freezes
// held until now: a freeze granted today never covers a day already over."
// godoc ApplyFreezes: "Repeating it freezes nothing twice."
func TestRedTeamConcurrentMixedAfterGap(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.August, Day: 3}
		clk := testenv.NewClock(noon(d0))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 10})
		rtAdd(t, s, "u", 1, "first")
		rtSign(t, s, "u", clk.Now())
		clk.Set(noon(d0.AddDays(3))) // d+1 takes the freeze, d+2 breaks
		ctx := context.Background()
		var mu sync.Mutex
		var reported []signin.Date
		var wg sync.WaitGroup
		for i := 0; i < 24; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				switch i % 4 {
				case 0:
					res, err := s.Sign(ctx, "u", clk.Now())
					if err != nil {
						t.Errorf("Sign: %v", err)
						return
					}
					mu.Lock()
					reported = append(reported, res.Frozen...)
					mu.Unlock()
				case 1:
					fd, err := s.ApplyFreezes(ctx, "u")
					if err != nil {
						t.Errorf("ApplyFreezes: %v", err)
						return
					}
					mu.Lock()
					reported = append(reported, fd...)
					mu.Unlock()
				case 2:
					if _, err := s.AddFreezes(ctx, "u", 1, fmt.Sprintf("late-%d", i)); err != nil {
						t.Errorf("AddFreezes: %v", err)
					}
				case 3:
					st, err := s.Stats(ctx, "u")
					if err != nil {
						t.Errorf("Stats: %v", err)
						return
					}
					if st.Current > 1 || st.FrozenDays != 1 {
						t.Errorf("concurrent Stats = %+v: Current must be ≤1 and FrozenDays 1", st)
					}
				}
			}(i)
		}
		wg.Wait()
		// AddFreezes returns no days, so the freeze may have been settled by
		// one of them; never twice.
		if len(reported) > 1 || (len(reported) == 1 && reported[0] != d0.AddDays(1)) {
			t.Errorf("frozen days reported = %v, want at most [%v] once", reported, d0.AddDays(1))
		}
		fd, err := s.FrozenDays(ctx, "u", d0, d0.AddDays(3))
		if err != nil || !rtEq(fd, rtDates(d0, 1)) {
			t.Errorf("FrozenDays = %v, %v; want [%v]", fd, err, d0.AddDays(1))
		}
		want := signin.Stats{Current: 1, Longest: 1, Total: 2, Freezes: 6, FrozenDays: 1}
		if st := rtStats(t, s, "u"); st != want {
			t.Errorf("Stats = %+v, want %+v", st, want)
		}
	})
}

// ---------------------------------------------------------------- policy

// Fewer freezes than the gap: the first days of the gap take them, the rest
// breaks the streak.
//
// godoc package: "So the freezes held are spent on the first days of any gap,
// and a gap longer than them breaks the streak"; Stats.Current "Zero once
// broken"; Streak "does not count freezes not yet applied".
func TestRedTeamFewerFreezesThanGap(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.September, Day: 8}
		clk := testenv.NewClock(noon(d0))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 2})
		ctx := context.Background()
		rtAdd(t, s, "u", 2, "g")
		rtSign(t, s, "u", noon(d0.AddDays(-1)))
		rtSign(t, s, "u", clk.Now())
		// d+1, d+2 frozen, d+3 breaks; now d+4
		clk.Set(noon(d0.AddDays(4)))
		if st := rtStats(t, s, "u"); st.Current != 0 || st.Freezes != 0 || st.FrozenDays != 2 || st.Total != 2 || st.Longest != 2 {
			t.Errorf("Stats before settling = %+v, want Current 0 Longest 2 Total 2 Freezes 0 FrozenDays 2", st)
		}
		if n, err := s.Streak(ctx, "u", clk.Now()); err != nil || n != 0 {
			t.Errorf("Streak = %d, %v; want 0", n, err)
		}
		res := rtSign(t, s, "u", clk.Now())
		if res.Streak != 1 || !rtEq(res.Frozen, rtDates(d0, 1, 2)) || res.Points != 10 {
			t.Errorf("Sign after a 3-day gap with 2 freezes = %+v, want Streak 1, Frozen [d+1 d+2], Points 10", res)
		}
		want := signin.Stats{Current: 1, Longest: 2, Total: 3, Freezes: 0, FrozenDays: 2}
		if st := rtStats(t, s, "u"); st != want {
			t.Errorf("Stats = %+v, want %+v", st, want)
		}
		// A sign-in at the next cut-over does not revive the old run.
		clk.Set(noon(d0.AddDays(5)))
		if res := rtSign(t, s, "u", clk.Now()); res.Streak != 2 {
			t.Errorf("next day's streak = %d, want 2", res.Streak)
		}
	})
}

// Freezes granted after the streak broke do not rescue it, and a freeze
// granted today does not cover yesterday.
//
// godoc package: "once none is, the streak is broken and later missed days take
// none, even if freezes are granted afterwards"; AddFreezes: "a freeze granted
// today never covers a day already over."
func TestRedTeamLateGrantDoesNotRescue(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.October, Day: 5}
		clk := testenv.NewClock(noon(d0))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 3})
		ctx := context.Background()

		// user a holds none: d+1 missed; granted on d+2.
		rtSign(t, s, "a", clk.Now())
		clk.Set(noon(d0.AddDays(2)))
		if got := rtAdd(t, s, "a", 2, "g"); got != 2 {
			t.Errorf("AddFreezes = %d, want 2", got)
		}
		if st := rtStats(t, s, "a"); st.Current != 0 || st.FrozenDays != 0 || st.Freezes != 2 {
			t.Errorf("Stats = %+v, want Current 0, FrozenDays 0, Freezes 2", st)
		}
		res := rtSign(t, s, "a", clk.Now())
		if res.Streak != 1 || len(res.Frozen) != 0 {
			t.Errorf("Sign = %+v, want Streak 1 and nothing frozen", res)
		}
		// The gap then goes on: the broken run's later missed days take none.
		clk.Set(noon(d0.AddDays(5))) // d+3, d+4 missed after a sign on d+2: covered by freezes
		fd, err := s.ApplyFreezes(ctx, "a")
		if err != nil || !rtEq(fd, rtDates(d0, 3, 4)) {
			t.Errorf("ApplyFreezes = %v, %v; want [d+3 d+4] (they follow a signed day)", fd, err)
		}

		// user b holds one: d+1 takes it, d+2 breaks, then a grant on d+3.
		clk.Set(noon(d0))
		rtAdd(t, s, "b", 1, "g")
		rtSign(t, s, "b", clk.Now())
		clk.Set(noon(d0.AddDays(3)))
		if got := rtAdd(t, s, "b", 3, "g2"); got != 3 {
			t.Errorf("AddFreezes = %d, want 3", got)
		}
		fd, err = s.FrozenDays(ctx, "b", d0, d0.AddDays(10))
		if err != nil || !rtEq(fd, rtDates(d0, 1)) {
			t.Errorf("FrozenDays(b) = %v, %v; want [d+1]", fd, err)
		}
		clk.Set(noon(d0.AddDays(6))) // d+3..d+5 missed, after the break: none taken
		if st := rtStats(t, s, "b"); st.Freezes != 3 || st.FrozenDays != 1 || st.Current != 0 {
			t.Errorf("Stats(b) = %+v, want Freezes 3, FrozenDays 1, Current 0", st)
		}
		if fd, err := s.ApplyFreezes(ctx, "b"); err != nil || len(fd) != 0 {
			t.Errorf("ApplyFreezes(b) = %v, %v; want none", fd, err)
		}
	})
}

// MaxFreezes caps every grant; its bounds are 1..365.
//
// godoc Config.MaxFreezes: "how many streak freezes a user may hold [2],
// 1..365 ... AddFreezes never raises a balance past it"; AddFreezes: "up to
// Config.MaxFreezes (the excess is lost)"; ErrConfig "is wrapped by every
// configuration error"; "Zero values take the defaults in brackets."
func TestRedTeamMaxFreezesCap(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		clk := testenv.NewClock(noon(signin.Date{Year: rtYear(), Month: time.November, Day: 11}))
		for _, bad := range []int{-1, 366, math.MinInt, math.MaxInt} {
			_, err := signin.New(r.Client, signin.Config{Namespace: r.Namespace, Layout: l, Users: 1000, Now: clk.Now, MaxFreezes: bad})
			if !errors.Is(err, signin.ErrConfig) {
				t.Errorf("MaxFreezes %d: err %v, want ErrConfig", bad, err)
			}
		}
		def := rtNew(t, r, l, clk, signin.Config{})
		if got := rtAdd(t, def, "d", 100, "g"); got != 2 {
			t.Errorf("default MaxFreezes: holds %d, want 2", got)
		}
		one := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 1})
		if got := rtAdd(t, one, "one", 5, "g"); got != 1 {
			t.Errorf("MaxFreezes 1: holds %d, want 1", got)
		}
		big := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 365})
		if got := rtAdd(t, big, "big", math.MaxInt, "huge"); got != 365 {
			t.Errorf("MaxFreezes 365, n=MaxInt: holds %d, want 365", got)
		}
		if got := rtAdd(t, big, "big2", 364, "a"); got != 364 {
			t.Errorf("holds %d, want 364", got)
		}
		if got := rtAdd(t, big, "big2", math.MaxInt, "b"); got != 365 {
			t.Errorf("holds %d after MaxInt more, want 365", got)
		}
		if st := rtStats(t, big, "big2"); st.Freezes != 365 {
			t.Errorf("Stats.Freezes = %d, want 365", st.Freezes)
		}
	})
}

// A frozen day never counts as signed.
//
// godoc package: "its streak is its signed days (frozen days keep it alive and
// add nothing)"; Stats.Total "frozen days are not counted"; History "(frozen
// days are not signed: see FrozenDays)"; Result.Points "BonusPoints on every
// BonusEvery-th day of a streak".
func TestRedTeamFreezeNeverAddsToTotal(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.February, Day: 26}
		clk := testenv.NewClock(noon(d0))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 2, BonusEvery: 3})
		ctx := context.Background()
		rtAdd(t, s, "u", 2, "g")
		steps := []struct {
			off    int
			streak int
			points int64
			frozen []int
		}{
			{0, 1, 10, nil},
			{2, 2, 10, []int{1}},  // frozen day adds nothing: streak 2, no bonus
			{4, 3, 110, []int{3}}, // third signed day: bonus
			{5, 4, 10, nil},
		}
		for _, st := range steps {
			clk.Set(noon(d0.AddDays(st.off)))
			res := rtSign(t, s, "u", clk.Now())
			if res.Streak != st.streak || res.Points != st.points || !rtEq(res.Frozen, rtDates(d0, st.frozen...)) {
				t.Errorf("Sign d+%d = %+v, want Streak %d Points %d Frozen %v", st.off, res, st.streak, st.points, rtDates(d0, st.frozen...))
			}
		}
		want := signin.Stats{Current: 4, Longest: 4, Total: 4, Freezes: 0, FrozenDays: 2}
		if got := rtStats(t, s, "u"); got != want {
			t.Errorf("Stats = %+v, want %+v", got, want)
		}
		h, _ := s.History(ctx, "u", d0, d0.AddDays(6))
		if !rtEq(h, rtDates(d0, 0, 2, 4, 5)) {
			t.Errorf("History = %v, want only signed days", h)
		}
		for _, off := range []int{1, 3} {
			if ok, err := s.Status(ctx, "u", d0.AddDays(off)); err != nil || ok {
				t.Errorf("Status(frozen d+%d) = %v, %v; want false", off, ok, err)
			}
		}
		if n, err := s.Streak(ctx, "u", clk.Now()); err != nil || n != 4 {
			t.Errorf("Streak = %d, %v; want 4", n, err)
		}
		// Feb 26 + 0..5 crosses into March: count both months.
		c1, _ := s.MonthCount(ctx, "u", d0.Year, d0.Month)
		c2, _ := s.MonthCount(ctx, "u", d0.AddDays(5).Year, d0.AddDays(5).Month)
		if c1+c2 != 4 {
			t.Errorf("MonthCount total = %d, want 4", c1+c2)
		}
	})
}

// A frozen day made up gives its freeze back, up to the cap, once.
//
// godoc MakeUp: "signs user in for a missed (or frozen) day ... a frozen day
// gives its freeze back (up to MaxFreezes)"; package: "A frozen day later
// signed (MakeUp, or a late sign-in) gives its freeze back, up to the cap";
// ErrAlreadySigned: "what a make-up whose reply was lost gets ... the day was
// made up, and its card spent, once."
func TestRedTeamFrozenDayMadeUpRefund(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.March, Day: 3}
		clk := testenv.NewClock(noon(d0))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 2})
		ctx := context.Background()
		rtAdd(t, s, "u", 2, "g1")
		if err := s.AddCards(ctx, "u", 3); err != nil {
			t.Fatal(err)
		}
		rtSign(t, s, "u", clk.Now())
		clk.Set(noon(d0.AddDays(3)))
		res := rtSign(t, s, "u", clk.Now()) // d+1, d+2 frozen
		if !rtEq(res.Frozen, rtDates(d0, 1, 2)) || res.Streak != 2 {
			t.Fatalf("Sign = %+v", res)
		}
		// under the cap: the refund shows
		mu, err := s.MakeUp(ctx, "u", d0.AddDays(1))
		if err != nil || mu.Streak != 3 || mu.AlreadySigned {
			t.Errorf("MakeUp(frozen d+1) = %+v, %v; want Streak 3", mu, err)
		}
		st := rtStats(t, s, "u")
		if st.Freezes != 1 || st.Total != 3 || st.Current != 3 || st.Longest != 3 {
			t.Errorf("Stats after one make-up = %+v, want Freezes 1 Total 3 Current 3 Longest 3", st)
		}
		t.Logf("Stats.FrozenDays after a frozen day was made up: %d (doc: \"how many missed days freezes have covered, ever\")", st.FrozenDays)
		// retried make-up: ErrAlreadySigned, no second refund, no second card
		if _, err := s.MakeUp(ctx, "u", d0.AddDays(1)); !errors.Is(err, signin.ErrAlreadySigned) {
			t.Errorf("retried MakeUp err = %v, want ErrAlreadySigned", err)
		}
		if st := rtStats(t, s, "u"); st.Freezes != 1 {
			t.Errorf("Freezes after retried make-up = %d, want 1", st.Freezes)
		}
		// at the cap: refill to 2 and make up d+2; the refund is lost
		if got := rtAdd(t, s, "u", 5, "g2"); got != 2 {
			t.Errorf("AddFreezes = %d, want 2", got)
		}
		mu, err = s.MakeUp(ctx, "u", d0.AddDays(2))
		if err != nil || mu.Streak != 4 {
			t.Errorf("MakeUp(frozen d+2) = %+v, %v; want Streak 4", mu, err)
		}
		st = rtStats(t, s, "u")
		if st.Freezes != 2 || st.Total != 4 || st.Current != 4 || st.Longest != 4 {
			t.Errorf("Stats = %+v, want Freezes 2 (capped) Total 4 Current 4 Longest 4", st)
		}
		h, _ := s.History(ctx, "u", d0, d0.AddDays(3))
		if !rtEq(h, rtDates(d0, 0, 1, 2, 3)) {
			t.Errorf("History = %v", h)
		}
		// one card left
		clk.Set(noon(d0.AddDays(5))) // d+4 frozen (2 held → 1)
		if _, err := s.ApplyFreezes(ctx, "u"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MakeUp(ctx, "u", d0.AddDays(4)); err != nil {
			t.Errorf("MakeUp with the third card: %v", err)
		}
		if _, err := s.MakeUp(ctx, "u", d0.AddDays(-1)); !errors.Is(err, signin.ErrNoCard) {
			t.Errorf("fourth make-up err = %v, want ErrNoCard", err)
		}
	})
}

// A late sign-in (a Service whose clock lags) fills a frozen day like a make-up
// and refunds its freeze.
//
// godoc Sign: "A day before the user's latest signed or frozen day (a late
// sign-in: a clock behind the others, a queued request) is filled as MakeUp
// fills it, without a card"; package: "A frozen day later signed (MakeUp, or a
// late sign-in) gives its freeze back"; Result.Streak "(for a make-up or a late
// sign-in: through the end of the run the day joined)".
func TestRedTeamLateSignInRefund(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.April, Day: 20}
		ahead := testenv.NewClock(noon(d0))
		behind := testenv.NewClock(noon(d0))
		a := rtNew(t, r, l, ahead, signin.Config{MaxFreezes: 2})
		b := rtNew(t, r, l, behind, signin.Config{MaxFreezes: 2})
		rtAdd(t, a, "u", 1, "g")
		rtSign(t, a, "u", ahead.Now())
		ahead.Set(noon(d0.AddDays(2)))
		if res := rtSign(t, a, "u", ahead.Now()); !rtEq(res.Frozen, rtDates(d0, 1)) {
			t.Fatalf("Sign d+2 = %+v, want d+1 frozen", res)
		}
		behind.Set(noon(d0.AddDays(1)))
		res := rtSign(t, b, "u", behind.Now())
		if res.Date != d0.AddDays(1) || res.AlreadySigned || res.Streak != 3 || res.Points != 10 || len(res.Frozen) != 0 {
			t.Errorf("late Sign = %+v, want Date d+1, Streak 3, Points 10", res)
		}
		want := signin.Stats{Current: 3, Longest: 3, Total: 3, Freezes: 1}
		got := rtStats(t, a, "u")
		t.Logf("FrozenDays after the late sign-in filled the frozen day: %d", got.FrozenDays)
		got.FrozenDays = 0
		if got != want {
			t.Errorf("Stats = %+v, want %+v (FrozenDays aside)", got, want)
		}
		fd, _ := a.FrozenDays(context.Background(), "u", d0, d0.AddDays(2))
		t.Logf("FrozenDays list after the fill: %v", fd)
		if res := rtSign(t, b, "u", behind.Now()); !res.AlreadySigned {
			t.Errorf("late Sign repeated = %+v, want AlreadySigned", res)
		}
		if st := rtStats(t, a, "u"); st.Freezes != 1 || st.Total != 3 {
			t.Errorf("Stats after repeated late sign = %+v", st)
		}
	})
}

// Two Services with different DayStart on the same keys. Not documented as
// fixed (unlike Buckets and Layout), so only what is documented per call is
// asserted: each call maps instants with its own DayOf, and Total counts days
// signed.
//
// godoc DayOf: "Every call that maps an instant to a day (Sign, ...) uses this
// rule"; Stats.Total "the days signed, ever".
func TestRedTeamTwoServicesDifferentDayStart(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.May, Day: 15}
		at := time.Date(d0.Year, d0.Month, d0.Day, 5, 0, 0, 0, time.UTC)
		clk := testenv.NewClock(at)
		a := rtNew(t, r, l, clk, signin.Config{})
		b := rtNew(t, r, l, clk, signin.Config{DayStart: 6 * time.Hour})
		ra := rtSign(t, a, "u", at)
		rb := rtSign(t, b, "u", at)
		if ra.Date != d0 || rb.Date != d0.AddDays(-1) {
			t.Errorf("dates %v / %v, want %v / %v", ra.Date, rb.Date, d0, d0.AddDays(-1))
		}
		if ra.Date != a.DayOf("u", at) || rb.Date != b.DayOf("u", at) {
			t.Errorf("Result.Date differs from DayOf")
		}
		for _, s := range []*signin.Service{a, b} {
			st := rtStats(t, s, "u")
			h, _ := s.History(context.Background(), "u", d0.AddDays(-3), d0.AddDays(3))
			if st.Total != len(h) || st.Total != 2 {
				t.Errorf("Stats %+v vs History %v: Total must be 2", st, h)
			}
		}
	})
}

// ---------------------------------------------------------------- DayOf / DayStart

type rtCut struct {
	name     string
	zone     string
	forward  bool // summer time begins (else ends)
	dayStart time.Duration
	// instants relative to the transition T, with the day expected as an
	// offset from S = the local date of T.
	probes []rtProbe
}

type rtProbe struct {
	rel  time.Duration
	want int
}

const ns = time.Nanosecond

func rtCuts() []rtCut {
	h, m := time.Hour, time.Minute
	return []rtCut{
		// New York: 02:00 EST → 03:00 EDT.
		{"NY-spring-2h00", "America/New_York", true, 2 * h, []rtProbe{{-ns, -1}, {0, 0}, {23*h - ns, 0}, {23 * h, 1}}},
		{"NY-spring-2h30", "America/New_York", true, 2*h + 30*m, []rtProbe{{-ns, -1}, {0, 0}, {23*h + 30*m - ns, 0}, {23*h + 30*m, 1}}},
		{"NY-spring-3h30", "America/New_York", true, 3*h + 30*m, []rtProbe{{0, -1}, {30*m - ns, -1}, {30 * m, 0}}},
		{"NY-spring-1h00", "America/New_York", true, 1 * h, []rtProbe{{-h - ns, -1}, {-h, 0}, {-ns, 0}, {0, 0}}},
		// New York: 02:00 EDT → 01:00 EST (01:00-02:00 twice).
		{"NY-fall-1h30", "America/New_York", false, time.Hour + 30*m, []rtProbe{{-30*m - ns, -1}, {-30 * m, 0}, {-ns, 0}, {0, 0}, {30*m - ns, 0}, {30 * m, 0}, {h, 0}, {24*h + 30*m - ns, 0}, {24*h + 30*m, 1}}},
		{"NY-fall-1h00", "America/New_York", false, h, []rtProbe{{-h - ns, -1}, {-h, 0}, {0, 0}, {ns, 0}, {24*h - ns, 0}, {24 * h, 1}}},
		// London: 01:00 GMT → 02:00 BST; 02:00 BST → 01:00 GMT.
		{"London-spring-1h30", "Europe/London", true, h + 30*m, []rtProbe{{-ns, -1}, {0, 0}}},
		{"London-spring-1h00", "Europe/London", true, h, []rtProbe{{-ns, -1}, {0, 0}}},
		{"London-spring-2h00", "Europe/London", true, 2 * h, []rtProbe{{-ns, -1}, {0, 0}}},
		{"London-fall-1h30", "Europe/London", false, h + 30*m, []rtProbe{{-30*m - ns, -1}, {-30 * m, 0}, {0, 0}, {29 * m, 0}, {30 * m, 0}, {45 * m, 0}}},
		// Lord Howe: half-hour shifts. 02:00 → 02:30 in October; 02:00 → 01:30 in April.
		{"LordHowe-spring-2h15", "Australia/Lord_Howe", true, 2*h + 15*m, []rtProbe{{-ns, -1}, {0, 0}}},
		{"LordHowe-spring-2h00", "Australia/Lord_Howe", true, 2 * h, []rtProbe{{-ns, -1}, {0, 0}}},
		{"LordHowe-spring-2h30", "Australia/Lord_Howe", true, 2*h + 30*m, []rtProbe{{-ns, -1}, {0, 0}}},
		{"LordHowe-fall-1h45", "Australia/Lord_Howe", false, h + 45*m, []rtProbe{{-15*m - ns, -1}, {-15 * m, 0}, {0, 0}, {15*m - ns, 0}, {15 * m, 0}, {24*h + 15*m - ns, 0}, {24*h + 15*m, 1}}},
		{"LordHowe-fall-1h30", "Australia/Lord_Howe", false, h + 30*m, []rtProbe{{-30*m - ns, -1}, {-30 * m, 0}, {-ns, 0}, {0, 0}, {ns, 0}}},
	}
}

// godoc DayOf: "the date of its local wall-clock time less Config.DayStart ...
// Where the clock skips DayStart (summer time begins), the day begins at the
// first instant after the gap. Where the clock is set back across DayStart
// (summer time ends), the day that began the first time the clock read
// DayStart goes on through the repeated hour: a day never goes back to the one
// before. Every call that maps an instant to a day (Sign, Today, ...) uses this
// rule."
func TestRedTeamDayOfDST(t *testing.T) {
	r := testenv.NewRedis(t)
	y := rtYear()
	for _, c := range rtCuts() {
		t.Run(c.name, func(t *testing.T) {
			loc := rtLoad(t, c.zone)
			T := rtTransition(t, loc, y, c.forward)
			S := signin.DateOf(T, loc)
			clk := testenv.NewClock(T)
			s, err := signin.New(r.Client, signin.Config{Namespace: r.Namespace + ":" + c.name, Location: loc, DayStart: c.dayStart, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range c.probes {
				at := T.Add(p.rel)
				want := S.AddDays(p.want)
				if got := s.DayOf("u", at); got != want {
					t.Errorf("DayOf(%s = %s) = %v, want %v", at.UTC().Format(time.RFC3339Nano), at.In(loc).Format("2006-01-02 15:04:05.999999999 MST"), got, want)
				}
				clk.Set(at)
				if got := s.Today("u"); got != want {
					t.Errorf("Today at %s = %v, want %v", at.In(loc).Format("15:04:05.999999999 MST"), got, want)
				}
			}
			// Sign in probe order: each probe's Result.Date is its day, and
			// a later instant of the same day answers AlreadySigned.
			user := "sign-" + c.name
			seen := map[signin.Date]bool{}
			for _, p := range c.probes {
				at := T.Add(p.rel)
				clk.Set(at)
				want := S.AddDays(p.want)
				res, err := s.Sign(context.Background(), user, at)
				if err != nil {
					t.Fatal(err)
				}
				if res.Date != want || res.AlreadySigned != seen[want] {
					t.Errorf("Sign at %s = %+v, want Date %v AlreadySigned %v", at.In(loc).Format("01-02 15:04:05.999999999 MST"), res, want, seen[want])
				}
				seen[want] = true
			}
		})
	}
}

// The freeze of a missed day is taken exactly at its cut-over, DST or not.
//
// godoc package: "each missed day that follows a covered one takes a freeze at
// its cut-over if one is held"; "Stats counts what settling would do"; DayOf:
// "Every call ... (... Stats and the freezes) uses this rule."
func TestRedTeamFreezeAtCutOver(t *testing.T) {
	r := testenv.NewRedis(t)
	y := rtYear()
	for _, c := range rtCuts() {
		if len(c.probes) < 2 || c.probes[0].want != -1 || c.probes[1].want != 0 || c.probes[1].rel-c.probes[0].rel != ns {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			loc := rtLoad(t, c.zone)
			T := rtTransition(t, loc, y, c.forward)
			cut := T.Add(c.probes[1].rel) // first instant of day S
			S := signin.DateOf(T, loc)
			clk := testenv.NewClock(cut.Add(-36 * time.Hour))
			s, err := signin.New(r.Client, signin.Config{Namespace: r.Namespace + ":" + c.name, Location: loc, DayStart: c.dayStart, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			rtAdd(t, s, "u", 1, "g")
			if res := rtSign(t, s, "u", clk.Now()); res.Date != S.AddDays(-2) {
				t.Fatalf("setup sign on %v, want %v", res.Date, S.AddDays(-2))
			}
			clk.Set(cut.Add(-ns)) // S-1 not over
			if st := rtStats(t, s, "u"); st.Freezes != 1 || st.FrozenDays != 0 || st.Current != 1 {
				t.Errorf("1ns before the cut-over Stats = %+v, want Freezes 1 FrozenDays 0 Current 1", st)
			}
			if fd, err := s.ApplyFreezes(ctx, "u"); err != nil || len(fd) != 0 {
				t.Errorf("ApplyFreezes 1ns before = %v, %v; want none", fd, err)
			}
			clk.Set(cut)
			if st := rtStats(t, s, "u"); st.Freezes != 0 || st.FrozenDays != 1 || st.Current != 1 {
				t.Errorf("at the cut-over Stats = %+v, want Freezes 0 FrozenDays 1 Current 1", st)
			}
			if fd, err := s.ApplyFreezes(ctx, "u"); err != nil || !rtEq(fd, []signin.Date{S.AddDays(-1)}) {
				t.Errorf("ApplyFreezes at the cut-over = %v, %v; want [%v]", fd, err, S.AddDays(-1))
			}
			if fd, err := s.ApplyFreezes(ctx, "u"); err != nil || len(fd) != 0 {
				t.Errorf("ApplyFreezes repeated = %v, %v; want none", fd, err)
			}
		})
	}
}

// Asia/Kolkata (+05:30, no DST) and bound values of DayStart.
//
// godoc Config.DayStart: "from 0 to 24h exclusive: with 4h, a check-in at 00:30
// counts for the day before"; DayOf: "with a DayStart of 4h, 03:59 on 2 March
// counts for 1 March, 04:00 for 2 March"; ErrConfig "is wrapped by every
// configuration error".
func TestRedTeamDayStartBoundsKolkata(t *testing.T) {
	r := testenv.NewRedis(t)
	loc := rtLoad(t, "Asia/Kolkata")
	y := rtYear()
	for _, bad := range []time.Duration{-ns, -time.Hour, 24 * time.Hour, 24*time.Hour + ns, 48 * time.Hour, math.MinInt64} {
		_, err := signin.New(r.Client, signin.Config{Namespace: r.Namespace, DayStart: bad})
		if !errors.Is(err, signin.ErrConfig) {
			t.Errorf("DayStart %v: err %v, want ErrConfig", bad, err)
		}
	}
	mar2 := signin.Date{Year: y, Month: time.March, Day: 2}
	at := func(hh, mm, ss, nn int) time.Time { return time.Date(y, time.March, 2, hh, mm, ss, nn, loc) }
	cases := []struct {
		start time.Duration
		at    time.Time
		want  signin.Date
	}{
		{0, at(0, 0, 0, 0), mar2},
		{0, at(0, 0, 0, 0).Add(-ns), mar2.AddDays(-1)},
		{4 * time.Hour, at(3, 59, 0, 0), mar2.AddDays(-1)},
		{4 * time.Hour, at(4, 0, 0, 0).Add(-ns), mar2.AddDays(-1)},
		{4 * time.Hour, at(4, 0, 0, 0), mar2},
		{4 * time.Hour, at(0, 30, 0, 0), mar2.AddDays(-1)},
		{23*time.Hour + 59*time.Minute, at(23, 59, 0, 0), mar2},
		{23*time.Hour + 59*time.Minute, at(23, 59, 0, 0).Add(-ns), mar2.AddDays(-1)},
		{23*time.Hour + 59*time.Minute, at(0, 0, 0, 0), mar2.AddDays(-1)},
		{24*time.Hour - ns, at(23, 59, 59, 999999999), mar2},
		{24*time.Hour - ns, at(23, 59, 59, 999999998), mar2.AddDays(-1)},
		{30 * time.Minute, at(0, 30, 0, 0), mar2},
		{30 * time.Minute, at(0, 30, 0, 0).Add(-ns), mar2.AddDays(-1)},
	}
	for i, c := range cases {
		clk := testenv.NewClock(c.at)
		s, err := signin.New(r.Client, signin.Config{Namespace: fmt.Sprintf("%s:k%d", r.Namespace, i), Location: loc, DayStart: c.start, Now: clk.Now})
		if err != nil {
			t.Errorf("DayStart %v: %v", c.start, err)
			continue
		}
		if got := s.DayOf("u", c.at); got != c.want {
			t.Errorf("DayStart %v: DayOf(%s) = %v, want %v", c.start, c.at.Format("15:04:05.999999999"), got, c.want)
		}
		if got := s.DayOf("u", c.at.In(time.UTC)); got != c.want {
			t.Errorf("DayStart %v: DayOf of the same instant in UTC = %v, want %v", c.start, got, c.want)
		}
		if res := rtSign(t, s, "u", c.at); res.Date != c.want {
			t.Errorf("DayStart %v: Sign at %s counted for %v, want %v", c.start, c.at.Format("15:04:05.999999999"), res.Date, c.want)
		}
		if st := rtStats(t, s, "u"); st.Current != 1 || st.Total != 1 {
			t.Errorf("DayStart %v: Stats %+v, want Current 1 Total 1", c.start, st)
		}
	}
}

// A late night with DayStart keeps the streak and spends no freeze.
//
// godoc package: "with DayStart 4h a check-in at 00:30 counts for the evening
// before, so a late night neither breaks a streak nor signs the next day."
func TestRedTeamLateNightNoFreeze(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		loc := rtLoad(t, "America/New_York")
		y := rtYear()
		clk := testenv.NewClock(time.Date(y, time.June, 1, 21, 0, 0, 0, loc))
		s := rtNew(t, r, l, clk, signin.Config{Location: loc, DayStart: 4 * time.Hour, MaxFreezes: 2})
		rtAdd(t, s, "u", 2, "g")
		rtSign(t, s, "u", clk.Now())                          // June 1, 21:00
		clk.Set(time.Date(y, time.June, 3, 0, 30, 0, 0, loc)) // counts for June 2
		res := rtSign(t, s, "u", clk.Now())
		if res.Date != (signin.Date{Year: y, Month: time.June, Day: 2}) || res.Streak != 2 || len(res.Frozen) != 0 {
			t.Errorf("late-night sign = %+v, want June 2, Streak 2, nothing frozen", res)
		}
		clk.Set(time.Date(y, time.June, 3, 3, 59, 59, 999999999, loc))
		if res := rtSign(t, s, "u", clk.Now()); !res.AlreadySigned {
			t.Errorf("03:59:59.999999999 = %+v, want June 2 AlreadySigned", res)
		}
		if st := rtStats(t, s, "u"); st.Freezes != 2 || st.Current != 2 {
			t.Errorf("Stats = %+v, want Freezes 2 Current 2", st)
		}
	})
}

// ---------------------------------------------------------------- bad input

// godoc ErrInvalidUser: "returned for a user id that is empty, longer than 128
// bytes (64 in the Packed layout), or holds a byte outside printable ASCII".
// AddFreezes "gives user n freezes": n ≤ 0 gives none (or is refused) — it must
// never take freezes away, which only gaps do (package doc).
func TestRedTeamFreezeBadInput(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.January, Day: 20}
		clk := testenv.NewClock(noon(d0))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 5})
		ctx := context.Background()
		limit := 128
		if l == signin.Packed {
			limit = 64
		}
		bad := []string{"", strings.Repeat("x", limit+1), "a\nb", "é", "a\x00b", "tab\t", "del\x7f", " \x1f"}
		for _, u := range bad {
			if _, err := s.AddFreezes(ctx, u, 1, "g"); !errors.Is(err, signin.ErrInvalidUser) {
				t.Errorf("AddFreezes(%q): %v, want ErrInvalidUser", u, err)
			}
			if _, err := s.ApplyFreezes(ctx, u); !errors.Is(err, signin.ErrInvalidUser) {
				t.Errorf("ApplyFreezes(%q): %v, want ErrInvalidUser", u, err)
			}
			if _, err := s.FrozenDays(ctx, u, d0, d0); !errors.Is(err, signin.ErrInvalidUser) {
				t.Errorf("FrozenDays(%q): %v, want ErrInvalidUser", u, err)
			}
			if _, err := s.Stats(ctx, u); !errors.Is(err, signin.ErrInvalidUser) {
				t.Errorf("Stats(%q): %v, want ErrInvalidUser", u, err)
			}
			if _, err := s.Sign(ctx, u, clk.Now()); !errors.Is(err, signin.ErrInvalidUser) {
				t.Errorf("Sign(%q): %v, want ErrInvalidUser", u, err)
			}
		}
		okUser := strings.Repeat("y", limit)
		if got := rtAdd(t, s, okUser, 1, "g"); got != 1 {
			t.Errorf("longest valid id holds %d", got)
		}
		rtStats(t, s, okUser)

		if got := rtAdd(t, s, "u", 3, "base"); got != 3 {
			t.Fatalf("holds %d", got)
		}
		for i, n := range []int{0, -1, -3, -1000, math.MinInt} {
			held, err := s.AddFreezes(ctx, "u", n, fmt.Sprintf("neg-%d", i))
			if err == nil && held != 3 {
				t.Errorf("AddFreezes(n=%d) accepted and holds %d, want 3 (nothing given)", n, held)
			}
			if st := rtStats(t, s, "u"); st.Freezes != 3 {
				t.Errorf("after AddFreezes(n=%d) (err %v) Stats.Freezes = %d, want 3", n, err, st.Freezes)
			}
		}
	})
}

// Printable-ASCII ids that look like key parts or globs are users like any
// other: one never reads or writes another's freezes or days.
//
// godoc ErrInvalidUser (what is invalid; everything else is a user id);
// Stats "returns user's statistics".
func TestRedTeamForgedUserNames(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.July, Day: 1}
		clk := testenv.NewClock(noon(d0))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 3})
		ctx := context.Background()
		rtAdd(t, s, "alice", 2, "g")
		rtSign(t, s, "alice", clk.Now())
		clk.Set(noon(d0.AddDays(2)))
		rtSign(t, s, "alice", clk.Now()) // d+1 frozen
		base := rtStats(t, s, "alice")
		suffixes := []string{":s", ":st", ":state", ":f", ":fz", ":frz", ":frozen", ":freeze", ":freezes", ":g", ":grant", ":grants", ":c", ":cards",
			":" + fmt.Sprint(d0.Year), ":" + fmt.Sprint(d0.Year) + ":f", "}", "{", "*", "?", "[a]", ":*", "\\", "%", "\"", "'"}
		forged := []string{"*", "?", "{alice}", "{", "}", "al?ce", ":", "::", "-", "0", "-1", "1e3", "nil", "false", "null"}
		for _, suf := range suffixes {
			forged = append(forged, "alice"+suf)
		}
		for _, u := range forged {
			if st := rtStats(t, s, u); st != (signin.Stats{}) {
				t.Errorf("fresh forged user %q has Stats %+v, want zero", u, st)
			}
			if fd, err := s.FrozenDays(ctx, u, d0, d0.AddDays(5)); err != nil || len(fd) != 0 {
				t.Errorf("forged %q FrozenDays = %v, %v", u, fd, err)
			}
			rtAdd(t, s, u, 1, "g")
			rtSign(t, s, u, clk.Now())
		}
		if st := rtStats(t, s, "alice"); st != base {
			t.Errorf("alice's Stats changed from %+v to %+v by forged users", base, st)
		}
		clk.Set(noon(d0.AddDays(4))) // alice: d+3 frozen (1 left → 0)
		fd, err := s.ApplyFreezes(ctx, "alice")
		if err != nil || !rtEq(fd, rtDates(d0, 3)) {
			t.Errorf("alice ApplyFreezes = %v, %v; want [d+3]", fd, err)
		}
		for _, u := range forged {
			st := rtStats(t, s, u)
			if st.Total != 1 || st.Freezes != 0 || st.FrozenDays != 1 {
				t.Errorf("forged %q Stats = %+v, want Total 1 Freezes 0 FrozenDays 1", u, st)
			}
		}
	})
}

// ---------------------------------------------------------------- clocks

// The clock goes back: nothing is frozen twice, days signed late fill as
// documented, and moving forward again settles once.
//
// godoc ApplyFreezes: "Repeating it freezes nothing twice"; Sign: "A day before
// the user's latest signed or frozen day (a late sign-in: a clock behind the
// others ...) is filled as MakeUp fills it"; package: "A frozen day later
// signed ... gives its freeze back"; DayOf "a day never goes back".
func TestRedTeamClockBackwards(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.December, Day: 29}
		clk := testenv.NewClock(noon(d0))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 2})
		ctx := context.Background()
		rtAdd(t, s, "u", 2, "g")
		rtSign(t, s, "u", clk.Now())
		clk.Set(noon(d0.AddDays(3))) // d+1 (Dec 30), d+2 (Dec 31) frozen; now 1 Jan
		fd, err := s.ApplyFreezes(ctx, "u")
		if err != nil || !rtEq(fd, rtDates(d0, 1, 2)) {
			t.Fatalf("ApplyFreezes = %v, %v", fd, err)
		}
		clk.Set(noon(d0.AddDays(1))) // back to Dec 30
		if fd, err := s.ApplyFreezes(ctx, "u"); err != nil || len(fd) != 0 {
			t.Errorf("ApplyFreezes with the clock back = %v, %v; want none", fd, err)
		}
		if st := rtStats(t, s, "u"); st.Total != 1 || st.FrozenDays != 2 || st.Freezes != 0 {
			t.Errorf("Stats with the clock back = %+v, want Total 1 FrozenDays 2 Freezes 0", st)
		}
		res := rtSign(t, s, "u", clk.Now()) // Dec 30 is before the latest frozen day: a fill
		if res.Date != d0.AddDays(1) || res.AlreadySigned || res.Streak != 2 || len(res.Frozen) != 0 {
			t.Errorf("Sign with the clock back = %+v, want Date d+1 Streak 2 (through the run)", res)
		}
		if st := rtStats(t, s, "u"); st.Freezes != 1 || st.Total != 2 {
			t.Errorf("Stats after the fill = %+v, want Freezes 1 (refund) Total 2", st)
		}
		clk.Set(noon(d0.AddDays(3)))
		res = rtSign(t, s, "u", clk.Now())
		if res.Streak != 3 || len(res.Frozen) != 0 || res.AlreadySigned {
			t.Errorf("Sign on 1 Jan = %+v, want Streak 3, nothing newly frozen", res)
		}
		want := signin.Stats{Current: 3, Longest: 3, Total: 3, Freezes: 1}
		got := rtStats(t, s, "u")
		got.FrozenDays = 0
		if got != want {
			t.Errorf("Stats = %+v, want %+v (FrozenDays aside)", got, want)
		}
		all, _ := s.FrozenDays(ctx, "u", d0, d0.AddDays(5))
		if !rtEq(all, rtDates(d0, 2)) {
			t.Errorf("FrozenDays = %v, want only d+2 (d+1 was signed)", all)
		}
	})
}

// A gap of a year with 365 freezes, across year ends.
//
// godoc Config.MaxFreezes "1..365"; package: "the freezes held are spent on the
// first days of any gap, and a gap longer than them breaks the streak";
// Result.Frozen "oldest first".
func TestRedTeamYearLongGap(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.December, Day: 20}
		clk := testenv.NewClock(noon(d0))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 365})
		ctx := context.Background()
		for _, c := range []struct {
			user   string
			gap    int
			streak int
			frozen int
		}{{"exact", 365, 2, 365}, {"over", 366, 1, 365}} {
			clk.Set(noon(d0))
			rtAdd(t, s, c.user, 365, "g")
			rtSign(t, s, c.user, clk.Now())
			clk.Set(noon(d0.AddDays(c.gap + 1)))
			res := rtSign(t, s, c.user, clk.Now())
			var want []signin.Date
			for i := 1; i <= c.frozen; i++ {
				want = append(want, d0.AddDays(i))
			}
			if res.Streak != c.streak || !rtEq(res.Frozen, want) {
				t.Errorf("%s: Sign after %d-day gap: Streak %d, %d frozen (first %v, last %v); want Streak %d, %d frozen", c.user, c.gap, res.Streak, len(res.Frozen), first(res.Frozen), last(res.Frozen), c.streak, c.frozen)
			}
			if !sort.SliceIsSorted(res.Frozen, func(i, j int) bool { return res.Frozen[i].Before(res.Frozen[j]) }) {
				t.Errorf("%s: Frozen not oldest first", c.user)
			}
			fd, err := s.FrozenDays(ctx, c.user, d0, d0.AddDays(c.gap+1))
			if err != nil || !rtEq(fd, want) {
				t.Errorf("%s: FrozenDays: %d days, %v", c.user, len(fd), err)
			}
			st := rtStats(t, s, c.user)
			if st.Current != c.streak || st.Total != 2 || st.Freezes != 0 || st.FrozenDays != c.frozen || st.Longest != c.streak {
				t.Errorf("%s: Stats %+v", c.user, st)
			}
		}
	})
}

func first(d []signin.Date) any {
	if len(d) == 0 {
		return nil
	}
	return d[0]
}

func last(d []signin.Date) any {
	if len(d) == 0 {
		return nil
	}
	return d[len(d)-1]
}

// ---------------------------------------------------------------- model

// A random walk checked against an eager model of the documented rule, and
// Stats checked against Streak, History, FrozenDays and ApplyFreezes.
//
// godoc package: "each missed day that follows a covered one takes a freeze at
// its cut-over if one is held ... Stats counts what settling would do"; Stats
// fields; Streak "Unlike Stats.Current it does not count freezes not yet
// applied"; ApplyFreezes "returns the days it froze".
func TestRedTeamStatsModel(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		for seed := int64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprint(seed), func(t *testing.T) { rtRunModel(t, l, seed) })
		}
	})
}

func rtRunModel(t *testing.T, l signin.Layout, seed int64) {
	r := testenv.NewRedis(t)
	rng := rand.New(rand.NewSource(seed))
	const maxF = 3
	d0 := signin.Date{Year: rtYear(), Month: time.December, Day: 1}
	clk := testenv.NewClock(noon(d0))
	s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: maxF, BonusEvery: 4})
	ctx := context.Background()
	const user = "m"
	if err := s.AddCards(ctx, user, 1000); err != nil {
		t.Fatal(err)
	}

	signed := map[int]bool{}
	frozen := map[int]bool{}
	frozenEver := 0
	bal := 0
	settled := -1 // days < settled+1 are settled
	today := 0
	covered := func(d int) bool { return signed[d] || frozen[d] }
	settle := func() {
		for d := settled + 1; d < today; d++ {
			if !signed[d] && covered(d-1) && bal > 0 {
				frozen[d] = true
				frozenEver++
				bal--
			}
		}
		if today-1 > settled {
			settled = today - 1
		}
	}
	runSigned := func(end int) int {
		n := 0
		for d := end; covered(d); d-- {
			if signed[d] {
				n++
			}
		}
		return n
	}
	runEnd := func(d int) int {
		for covered(d + 1) {
			d++
		}
		return d
	}
	longest := 0
	updLongest := func() {
		for d := -1; d <= today+1; d++ {
			if covered(d) && !covered(d+1) {
				if n := runSigned(d); n > longest {
					longest = n
				}
			}
		}
	}
	grant := 0
	reported := map[signin.Date]bool{}
	check := func(step int, what string) {
		t.Helper()
		cur := runSigned(today)
		if !covered(today) {
			cur = runSigned(today - 1)
		}
		total := len(signed)
		want := signin.Stats{Current: cur, Longest: longest, Total: total, Freezes: bal, FrozenDays: frozenEver}
		got := rtStats(t, s, user)
		if got != want {
			t.Fatalf("seed %d step %d (%s, today d+%d): Stats = %+v, model %+v", seed, step, what, today, got, want)
		}
	}
	for step := 0; step < 120; step++ {
		// advance 0..3 days
		adv := rng.Intn(4)
		if rng.Intn(5) == 0 {
			adv = 0
		}
		today += adv
		clk.Set(noon(d0.AddDays(today)).Add(time.Duration(rng.Intn(11*3600)) * time.Second))
		settle()
		updLongest()
		check(step, "after advance")
		switch op := rng.Intn(10); {
		case op < 5:
			res := rtSign(t, s, user, clk.Now())
			was := signed[today]
			signed[today] = true
			updLongest()
			wantStreak := runSigned(today)
			if res.AlreadySigned != was || res.Streak != wantStreak {
				t.Fatalf("seed %d step %d: Sign d+%d = %+v, model AlreadySigned %v Streak %d", seed, step, today, res, was, wantStreak)
			}
			if !was {
				wp := int64(10)
				if wantStreak%4 == 0 {
					wp += 100
				}
				if res.Points != wp {
					t.Fatalf("seed %d step %d: Points %d, want %d", seed, step, res.Points, wp)
				}
			}
			for _, d := range res.Frozen {
				if reported[d] {
					t.Fatalf("seed %d step %d: %v reported frozen twice", seed, step, d)
				}
				reported[d] = true
			}
		case op < 7:
			grant++
			n := 1 + rng.Intn(2)
			held := rtAdd(t, s, user, n, fmt.Sprint("g", grant))
			bal += n
			if bal > maxF {
				bal = maxF
			}
			if held != bal {
				t.Fatalf("seed %d step %d: AddFreezes held %d, model %d", seed, step, held, bal)
			}
		case op < 8:
			// make up a missed, unfrozen day in the window
			var cands []int
			for d := today - 6; d < today; d++ {
				if d >= 0 && !signed[d] && !frozen[d] {
					cands = append(cands, d)
				}
			}
			if len(cands) == 0 {
				continue
			}
			d := cands[rng.Intn(len(cands))]
			res, err := s.MakeUp(ctx, user, d0.AddDays(d))
			if err != nil {
				t.Fatalf("seed %d step %d: MakeUp d+%d: %v", seed, step, d, err)
			}
			for _, fd := range res.Frozen {
				if reported[fd] {
					t.Fatalf("seed %d step %d: %v reported frozen twice", seed, step, fd)
				}
				reported[fd] = true
			}
			signed[d] = true
			updLongest()
			if ws := runSigned(runEnd(d)); res.Streak != ws {
				t.Fatalf("seed %d step %d: MakeUp d+%d Streak %d, model %d", seed, step, d, res.Streak, ws)
			}
		default:
			before := rtStats(t, s, user)
			fd, err := s.ApplyFreezes(ctx, user)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range fd {
				if reported[d] {
					t.Fatalf("seed %d step %d: %v reported frozen twice", seed, step, d)
				}
				reported[d] = true
			}
			if after := rtStats(t, s, user); after != before {
				t.Fatalf("seed %d step %d: Stats changed by ApplyFreezes: %+v → %+v", seed, step, before, after)
			}
			n, err := s.Streak(ctx, user, clk.Now())
			if err != nil || n != before.Current {
				t.Fatalf("seed %d step %d: after ApplyFreezes Streak = %d, %v; Stats.Current %d", seed, step, n, err, before.Current)
			}
		}
		check(step, "after op")
	}
	// The stored days agree with the model.
	h, err := s.History(ctx, user, d0.AddDays(-1), d0.AddDays(today+1))
	if err != nil {
		t.Fatal(err)
	}
	var wantH, wantF []signin.Date
	for d := 0; d <= today; d++ {
		if signed[d] {
			wantH = append(wantH, d0.AddDays(d))
		}
		if frozen[d] {
			wantF = append(wantF, d0.AddDays(d))
		}
	}
	if !rtEq(h, wantH) {
		t.Errorf("seed %d: History %v, model %v", seed, h, wantH)
	}
	if _, err := s.ApplyFreezes(ctx, user); err != nil {
		t.Fatal(err)
	}
	fd, err := s.FrozenDays(ctx, user, d0.AddDays(-1), d0.AddDays(today+1))
	if err != nil || !rtEq(fd, wantF) {
		t.Errorf("seed %d: FrozenDays %v (%v), model %v", seed, fd, err, wantF)
	}
}

// A space is not an id byte: ErrInvalidUser, and nothing is written.
//
// godoc ErrInvalidUser: "returned for a user id that is empty, longer than 128
// bytes (64 in the Packed layout), or holds a byte outside visible ASCII,
// 0x21–0x7E: no space, no control byte". (The red-team suite first read the
// earlier "printable ASCII" as allowing 0x20; the doc now says which.)
func TestRedTeamSpaceInUserID(t *testing.T) {
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(noon(signin.Date{Year: rtYear(), Month: time.July, Day: 1}))
	s := rtNew(t, r, signin.Bitmaps, clk, signin.Config{})
	for _, u := range []string{"alice smith", " ", "a b"} {
		if _, err := s.AddFreezes(context.Background(), u, 1, "g"); !errors.Is(err, signin.ErrInvalidUser) {
			t.Errorf("AddFreezes(%q): %v, want ErrInvalidUser", u, err)
		}
		if _, err := s.Sign(context.Background(), u, clk.Now()); !errors.Is(err, signin.ErrInvalidUser) {
			t.Errorf("Sign(%q): %v, want ErrInvalidUser", u, err)
		}
	}
	if n, err := r.Client.Keys(context.Background(), r.Namespace+"*").Result(); err != nil || len(n) != 0 {
		t.Errorf("refused ids wrote %v (%v)", n, err)
	}
}

// Many goroutines make up the same frozen day: one fills it, one card is
// spent, the freeze comes back once.
//
// godoc ErrAlreadySigned: "the day was made up, and its card spent, once";
// MakeUp: "a frozen day gives its freeze back (up to MaxFreezes)".
func TestRedTeamConcurrentMakeUpFrozenDay(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.March, Day: 20}
		clk := testenv.NewClock(noon(d0))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 5})
		ctx := context.Background()
		rtAdd(t, s, "u", 2, "g")
		if err := s.AddCards(ctx, "u", 2); err != nil {
			t.Fatal(err)
		}
		rtSign(t, s, "u", clk.Now())
		clk.Set(noon(d0.AddDays(2)))
		rtSign(t, s, "u", clk.Now()) // d+1 frozen, 1 held
		const n = 24
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, errs[i] = s.MakeUp(ctx, "u", d0.AddDays(1))
			}(i)
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, signin.ErrAlreadySigned):
			default:
				t.Errorf("MakeUp: %v", err)
			}
		}
		if ok != 1 {
			t.Errorf("%d make-ups succeeded, want 1", ok)
		}
		if st := rtStats(t, s, "u"); st.Freezes != 2 || st.Total != 3 || st.Current != 3 {
			t.Errorf("Stats = %+v, want Freezes 2 (one refund) Total 3 Current 3", st)
		}
		// one card left: a second missed day can be made up, a third cannot
		clk.Set(noon(d0.AddDays(5))) // d+3, d+4 frozen (2 → 0)
		if _, err := s.MakeUp(ctx, "u", d0.AddDays(3)); err != nil {
			t.Errorf("MakeUp with the last card: %v", err)
		}
		if _, err := s.MakeUp(ctx, "u", d0.AddDays(4)); !errors.Is(err, signin.ErrNoCard) {
			t.Errorf("MakeUp without a card: %v, want ErrNoCard", err)
		}
	})
}

// A lagging Service's late sign-ins race a make-up of the same frozen day and
// fresh sign-ins on today: the day is filled once, the freeze comes back once,
// and a card is spent only if the make-up filled it.
//
// godoc Sign: "A day before the user's latest signed or frozen day ... is filled
// as MakeUp fills it, without a card"; package: "gives its freeze back, up to
// the cap".
func TestRedTeamLateSignRacesMakeUp(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.June, Day: 20}
		ahead := testenv.NewClock(noon(d0))
		behind := testenv.NewClock(noon(d0.AddDays(1)))
		a := rtNew(t, r, l, ahead, signin.Config{MaxFreezes: 3})
		b := rtNew(t, r, l, behind, signin.Config{MaxFreezes: 3})
		ctx := context.Background()
		rtAdd(t, a, "u", 2, "g")
		if err := a.AddCards(ctx, "u", 1); err != nil {
			t.Fatal(err)
		}
		rtSign(t, a, "u", ahead.Now())
		ahead.Set(noon(d0.AddDays(2)))
		rtSign(t, a, "u", ahead.Now()) // d+1 frozen; 1 held
		var wg sync.WaitGroup
		var mu sync.Mutex
		fills := 0
		madeUp := false
		for i := 0; i < 18; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				switch i % 3 {
				case 0:
					res, err := b.Sign(ctx, "u", behind.Now())
					if err != nil {
						t.Errorf("late Sign: %v", err)
						return
					}
					if res.Date != d0.AddDays(1) {
						t.Errorf("late Sign date %v", res.Date)
					}
					if !res.AlreadySigned {
						mu.Lock()
						fills++
						mu.Unlock()
					}
				case 1:
					_, err := a.MakeUp(ctx, "u", d0.AddDays(1))
					if err == nil {
						mu.Lock()
						fills++
						madeUp = true
						mu.Unlock()
					} else if !errors.Is(err, signin.ErrAlreadySigned) {
						t.Errorf("MakeUp: %v", err)
					}
				case 2:
					if res, err := a.Sign(ctx, "u", ahead.Now()); err != nil || !res.AlreadySigned {
						t.Errorf("today's Sign = %+v, %v; want AlreadySigned", res, err)
					}
				}
			}(i)
		}
		wg.Wait()
		if fills != 1 {
			t.Errorf("the frozen day was filled %d times, want 1", fills)
		}
		if st := rtStats(t, a, "u"); st.Freezes != 2 || st.Total != 3 || st.Current != 3 {
			t.Errorf("Stats = %+v, want Freezes 2 Total 3 Current 3", st)
		}
		// the card is left unless the make-up filled the day
		ahead.Set(noon(d0.AddDays(4))) // d+3 frozen
		_, err := a.MakeUp(ctx, "u", d0.AddDays(3))
		if madeUp && !errors.Is(err, signin.ErrNoCard) {
			t.Errorf("card spent by the make-up, yet a second MakeUp: %v", err)
		}
		if !madeUp && err != nil {
			t.Errorf("the late sign-in filled the day without a card, yet MakeUp: %v", err)
		}
	})
}

// Lost replies on MakeUp and ApplyFreezes.
//
// godoc ErrAlreadySigned: "what a make-up whose reply was lost gets when
// go-redis resends it: the day was made up, and its card spent, once";
// ApplyFreezes: "Repeating it freezes nothing twice".
func TestRedTeamLostReplyMakeUpAndApply(t *testing.T) {
	r, proxy := testenv.NewFaultyRedis(t)
	d0 := signin.Date{Year: rtYear(), Month: time.April, Day: 10}
	clk := testenv.NewClock(noon(d0))
	s := rtNew(t, r, signin.Bitmaps, clk, signin.Config{MaxFreezes: 3})
	ctx := context.Background()
	// warm the scripts on another user
	rtAdd(t, s, "warm", 1, "w")
	rtSign(t, s, "warm", clk.Now())
	if err := s.AddCards(ctx, "warm", 1); err != nil {
		t.Fatal(err)
	}

	rtAdd(t, s, "u", 3, "g")
	if err := s.AddCards(ctx, "u", 2); err != nil {
		t.Fatal(err)
	}
	rtSign(t, s, "u", clk.Now())
	rtSign(t, s, "warm", clk.Now())
	clk.Set(noon(d0.AddDays(3))) // d+1, d+2 to freeze
	if _, err := s.ApplyFreezes(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MakeUp(ctx, "warm", d0.AddDays(1)); err != nil {
		t.Fatal(err)
	}

	cuts := proxy.Cuts()
	proxy.DropReplies(1)
	fd, err := s.ApplyFreezes(ctx, "u")
	if err != nil {
		t.Fatalf("ApplyFreezes through a lost reply: %v", err)
	}
	if proxy.Cuts() == cuts {
		t.Fatal("fault not felt")
	}
	t.Logf("ApplyFreezes answered %v after its reply was lost", fd)
	if st := rtStats(t, s, "u"); st.Freezes != 1 || st.FrozenDays != 2 {
		t.Errorf("Stats = %+v, want Freezes 1 FrozenDays 2", st)
	}

	cuts = proxy.Cuts()
	proxy.DropReplies(1)
	_, err = s.MakeUp(ctx, "u", d0.AddDays(1))
	if proxy.Cuts() == cuts {
		t.Fatal("fault not felt")
	}
	if err != nil && !errors.Is(err, signin.ErrAlreadySigned) {
		t.Fatalf("MakeUp through a lost reply: %v", err)
	}
	if st := rtStats(t, s, "u"); st.Freezes != 2 || st.Total != 2 {
		t.Errorf("Stats = %+v, want Freezes 2 (refunded once) Total 2", st)
	}
	// one card left
	if _, err := s.MakeUp(ctx, "u", d0.AddDays(2)); err != nil {
		t.Errorf("MakeUp with the second card: %v (the lost reply spent two?)", err)
	}
	if st := rtStats(t, s, "u"); st.Freezes != 3 || st.Total != 3 || st.Current != 3 {
		t.Errorf("Stats = %+v, want Freezes 3 Total 3 Current 3", st)
	}
}

// Per-user zones: each user's days, cut-overs and freezes follow their own
// zone, and a nil UserLocation result falls back to Location.
//
// godoc Config.Location: "UserLocation, when set, gives a user's own zone (nil
// result: Location)"; package: "A day is the user's local day (Config.Location
// or UserLocation) starting at Config.DayStart".
func TestRedTeamUserLocationFreezes(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		lh := rtLoad(t, "Australia/Lord_Howe")
		kol := rtLoad(t, "Asia/Kolkata")
		y := rtYear()
		// 1 July y, 04:00 in Lord Howe (+10:30 in July) = 30 June 17:30 UTC
		start := time.Date(y, time.July, 1, 4, 0, 0, 0, lh)
		clk := testenv.NewClock(start)
		s := rtNew(t, r, l, clk, signin.Config{
			Location: kol,
			UserLocation: func(u string) *time.Location {
				if u == "lh" {
					return lh
				}
				return nil
			},
			DayStart:   4 * time.Hour,
			MaxFreezes: 2,
		})
		ctx := context.Background()
		jul1 := signin.Date{Year: y, Month: time.July, Day: 1}
		if got := s.Today("lh"); got != jul1 {
			t.Errorf("Today(lh) = %v, want %v", got, jul1)
		}
		// in Kolkata it is 30 June 23:00: before 04:00 of the 30th? no: 23:00 ≥ 04:00 → 30 June
		if got := s.Today("in"); got != jul1.AddDays(-1) {
			t.Errorf("Today(in) = %v, want %v", got, jul1.AddDays(-1))
		}
		rtAdd(t, s, "lh", 1, "g")
		rtAdd(t, s, "in", 1, "g")
		rtSign(t, s, "lh", clk.Now()) // lh: 1 July
		rtSign(t, s, "in", clk.Now()) // in: 30 June
		// 2 days later minus 1ns in Lord Howe: lh's 2 July not over
		clk.Set(start.Add(48*time.Hour - ns))
		if st := rtStats(t, s, "lh"); st.Freezes != 1 || st.FrozenDays != 0 {
			t.Errorf("lh 1ns before its cut-over: %+v, want Freezes 1 FrozenDays 0", st)
		}
		// in: now 2 July 22:59 Kolkata → 1 July missed → frozen
		if st := rtStats(t, s, "in"); st.Freezes != 0 || st.FrozenDays != 1 || st.Current != 1 {
			t.Errorf("in: %+v, want Freezes 0 FrozenDays 1 Current 1", st)
		}
		clk.Set(start.Add(48 * time.Hour))
		fd, err := s.ApplyFreezes(ctx, "lh")
		if err != nil || !rtEq(fd, []signin.Date{jul1.AddDays(1)}) {
			t.Errorf("lh ApplyFreezes at its cut-over = %v, %v; want [%v]", fd, err, jul1.AddDays(1))
		}
	})
}

// Streak ignores freezes not yet applied; Stats.Current counts them.
//
// godoc Streak: "ending the day before if that day is neither signed nor frozen
// ... Unlike Stats.Current it does not count freezes not yet applied to missed
// days"; Stats.Current "counting missed days the freezes held will cover as
// frozen"; package: "Streak reads the stored days only".
func TestRedTeamStreakVersusStatsPending(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		r := testenv.NewRedis(t)
		d0 := signin.Date{Year: rtYear(), Month: time.August, Day: 30}
		clk := testenv.NewClock(noon(d0))
		s := rtNew(t, r, l, clk, signin.Config{MaxFreezes: 2})
		ctx := context.Background()
		rtAdd(t, s, "u", 1, "g")
		rtSign(t, s, "u", noon(d0.AddDays(-1)))
		rtSign(t, s, "u", clk.Now())
		clk.Set(noon(d0.AddDays(2))) // d+1 pending freeze
		if st := rtStats(t, s, "u"); st.Current != 2 || st.Freezes != 0 || st.FrozenDays != 1 {
			t.Errorf("Stats = %+v, want Current 2 Freezes 0 FrozenDays 1", st)
		}
		if n, err := s.Streak(ctx, "u", clk.Now()); err != nil || n != 0 {
			t.Errorf("Streak before ApplyFreezes = %d, %v; want 0 (d+1 not stored as frozen)", n, err)
		}
		if n, err := s.Streak(ctx, "u", noon(d0)); err != nil || n != 2 {
			t.Errorf("Streak at d = %d, %v; want 2", n, err)
		}
		if _, err := s.ApplyFreezes(ctx, "u"); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Streak(ctx, "u", clk.Now()); err != nil || n != 2 {
			t.Errorf("Streak after ApplyFreezes = %d, %v; want 2", n, err)
		}
	})
}
