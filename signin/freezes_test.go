package signin_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/signin"
)

// transition returns the first instant of year at which loc's clock
// changes by delta (negative: set back).
func transition(t *testing.T, loc *time.Location, year int, delta time.Duration) time.Time {
	t.Helper()
	at := time.Date(year, 1, 1, 0, 0, 0, 0, loc)
	for range 4 {
		_, end := at.ZoneBounds()
		if end.IsZero() {
			break
		}
		_, before := end.Add(-time.Second).Zone()
		_, after := end.Zone()
		if time.Duration(after-before)*time.Second == delta {
			return end
		}
		at = end
	}
	t.Fatalf("%s changes by %v nowhere in %d", loc, delta, year)
	return time.Time{}
}

// DayOf: the date of the wall clock less DayStart; a day skipped into
// begins after the gap; in a repeated hour the day never goes back.
func TestDayOfCutOver(t *testing.T) {
	clk := testenv.NewClock(testenv.Now())
	load := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	ny, london, kolkata, lordHowe := load("America/New_York"), load("Europe/London"), load("Asia/Kolkata"), load("Australia/Lord_Howe")
	y := y0 + 1
	cases := []struct {
		loc      *time.Location
		dayStart time.Duration
		at       time.Time
		prev     bool // counts for the day before at's local date
	}{
		{kolkata, 4 * time.Hour, time.Date(y, 3, 2, 3, 59, 59, 0, kolkata), true},
		{kolkata, 4 * time.Hour, time.Date(y, 3, 2, 4, 0, 0, 0, kolkata), false},
		{kolkata, 4 * time.Hour, time.Date(y, 3, 2, 0, 30, 0, 0, kolkata), true},
		{kolkata, 0, time.Date(y, 3, 2, 0, 0, 0, 0, kolkata), false},
		// New York skips 02:00-03:00: with 02:15 the day begins at 03:00.
		{ny, 2*time.Hour + 15*time.Minute, transition(t, ny, y, time.Hour).Add(-time.Second), true},
		{ny, 2*time.Hour + 15*time.Minute, transition(t, ny, y, time.Hour), false},
		// London repeats 01:00-02:00: 01:50 BST begins the day, 01:10 GMT
		// (20 minutes later) goes on with it.
		{london, time.Hour + 45*time.Minute, transition(t, london, y, -time.Hour).Add(-10 * time.Minute), false},
		{london, time.Hour + 45*time.Minute, transition(t, london, y, -time.Hour).Add(10 * time.Minute), false},
		{london, time.Hour + 45*time.Minute, transition(t, london, y, -time.Hour).Add(-20 * time.Minute), true},
		// Lord Howe repeats 01:30-02:00 (a 30-minute change).
		{lordHowe, time.Hour + 45*time.Minute, transition(t, lordHowe, y, -30*time.Minute).Add(-20 * time.Minute), true},
		{lordHowe, time.Hour + 45*time.Minute, transition(t, lordHowe, y, -30*time.Minute).Add(-10 * time.Minute), false},
		{lordHowe, time.Hour + 45*time.Minute, transition(t, lordHowe, y, -30*time.Minute).Add(5 * time.Minute), false}, // 01:35 again
		{lordHowe, time.Hour + 45*time.Minute, transition(t, lordHowe, y, -30*time.Minute).Add(20 * time.Minute), false},
	}
	for i, c := range cases {
		s, err := signin.New(testenv.NewRedis(t).Client, signin.Config{Location: c.loc, DayStart: c.dayStart, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		want := signin.DateOf(c.at, c.loc)
		if c.prev {
			want = want.AddDays(-1)
		}
		if got := s.DayOf("u", c.at); got != want {
			t.Errorf("case %d: %s at %s with DayStart %v: %s, want %s", i, c.loc, c.at.In(c.loc).Format(time.RFC3339), c.dayStart, got, want)
		}
		clk.Set(c.at)
		if s.Today("u") != s.DayOf("u", c.at) {
			t.Errorf("case %d: Today disagrees with DayOf", i)
		}
	}
}

// With DayStart 04:00 a check-in at 00:30 counts for the evening before:
// it neither breaks the streak nor signs the next day.
func TestLateNightCheckInKeepsStreak(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		ctx := context.Background()
		ny, _ := time.LoadLocation("America/New_York")
		clk := &testenv.Clock{}
		s := newService(t, testenv.NewRedis(t), clk, signin.Config{Layout: l, Location: ny, DayStart: 4 * time.Hour})
		first := time.Date(y0+1, 3, 5, 21, 0, 0, 0, ny)
		late := time.Date(y0+1, 3, 7, 0, 30, 0, 0, ny) // the night after 6 March
		morning := time.Date(y0+1, 3, 7, 4, 0, 0, 0, ny)
		for i, c := range []struct {
			at     time.Time
			day    signin.Date
			streak int
			again  bool
		}{{first, day(y0+1, 3, 5), 1, false}, {late, day(y0+1, 3, 6), 2, false}, {late.Add(time.Hour), day(y0+1, 3, 6), 2, true}, {morning, day(y0+1, 3, 7), 3, false}} {
			clk.Set(c.at)
			res, err := s.Sign(ctx, "ann", c.at)
			if err != nil || res.Date != c.day || res.Streak != c.streak || res.AlreadySigned != c.again {
				t.Fatalf("sign %d at %s: %+v, %v; want %s, streak %d", i, c.at, res, err, c.day, c.streak)
			}
		}
		if st, _ := s.Stats(ctx, "ann"); st != (signin.Stats{Current: 3, Longest: 3, Total: 3}) {
			t.Fatalf("stats %+v", st)
		}
	})
}

// The freeze rules, step by step: a missed day takes a freeze at the next
// call; when the freezes run out the streak breaks (the freezes held are
// spent on the first missed days, as a daily sweep would have spent them);
// a grant repeated adds nothing, and a freeze granted later never revives a
// broken streak; a frozen day made up gives its freeze back; frozen days
// keep a streak and never count.
func TestFreezeRules(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
			ctx := context.Background()
			clk := &testenv.Clock{}
			s := newService(t, r, clk, signin.Config{Layout: l, MaxFreezes: 2})
			at := func(d int) time.Time { clk.Set(noon(day(y0+1, 5, d))); return clk.Now() }
			sign := func(d int, streak int, frozen ...int) {
				t.Helper()
				res, err := s.Sign(ctx, "bo", at(d))
				var want []signin.Date
				for _, f := range frozen {
					want = append(want, day(y0+1, 5, f))
				}
				if err != nil || res.Streak != streak || fmt.Sprint(res.Frozen) != fmt.Sprint(want) {
					t.Fatalf("sign on day %d: %+v, %v; want streak %d, frozen %v", d, res, err, streak, want)
				}
			}
			stats := func(want signin.Stats) {
				t.Helper()
				if got, err := s.Stats(ctx, "bo"); err != nil || got != want {
					t.Fatalf("stats %+v, %v; want %+v", got, err, want)
				}
			}
			sign(1, 1)
			sign(2, 2)
			sign(3, 3)
			at(3)
			if n, err := s.AddFreezes(ctx, "bo", 2, "welcome"); err != nil || n != 2 {
				t.Fatalf("add freezes: %d, %v", n, err)
			}
			if n, _ := s.AddFreezes(ctx, "bo", 2, "welcome"); n != 2 {
				t.Fatalf("a repeated grant: %d freezes", n)
			}
			at(5)
			stats(signin.Stats{Current: 3, Longest: 3, Total: 3, Freezes: 1, FrozenDays: 1}) // day 4 will take one
			sign(5, 4, 4)
			// Days 6, 7 and 8 missed with one freeze: day 6 takes it, 7 breaks.
			at(9)
			stats(signin.Stats{Longest: 4, Total: 4, FrozenDays: 2})
			sign(9, 1, 6)
			at(9)
			if n, _ := s.AddFreezes(ctx, "bo", 1, "later"); n != 1 {
				t.Fatalf("freezes after a later grant: %d", n)
			}
			stats(signin.Stats{Current: 1, Longest: 4, Total: 5, Freezes: 1, FrozenDays: 2})
			// Making up frozen day 6: the run 1..6 has five signed days, and
			// the freeze comes back (held 2, the cap).
			s.AddCards(ctx, "bo", 1)
			if res, err := s.MakeUp(ctx, "bo", day(y0+1, 5, 6)); err != nil || res.Streak != 5 {
				t.Fatalf("make-up of a frozen day: %+v, %v", res, err)
			}
			stats(signin.Stats{Current: 1, Longest: 5, Total: 6, Freezes: 2, FrozenDays: 1})
			// A sweep freezes day 10 and then nothing more.
			at(11)
			for i, want := range []string{fmt.Sprint([]signin.Date{day(y0+1, 5, 10)}), "[]"} {
				if got, err := s.ApplyFreezes(ctx, "bo"); err != nil || fmt.Sprint(got) != want {
					t.Fatalf("sweep %d: %v, %v; want %v", i, got, err, want)
				}
			}
			stats(signin.Stats{Current: 1, Longest: 5, Total: 6, Freezes: 1, FrozenDays: 2})
			if st, _ := s.Streak(ctx, "bo", clk.Now()); st != 1 {
				t.Fatalf("Streak %d through frozen day 10, want 1", st)
			}
			hist, _ := s.History(ctx, "bo", day(y0+1, 5, 1), day(y0+1, 5, 11))
			frozen, _ := s.FrozenDays(ctx, "bo", day(y0+1, 5, 1), day(y0+1, 5, 11))
			if fmt.Sprint(hist) != fmt.Sprint([]signin.Date{day(y0+1, 5, 1), day(y0+1, 5, 2), day(y0+1, 5, 3), day(y0+1, 5, 5), day(y0+1, 5, 6), day(y0+1, 5, 9)}) ||
				fmt.Sprint(frozen) != fmt.Sprint([]signin.Date{day(y0+1, 5, 4), day(y0+1, 5, 10)}) {
				t.Fatalf("history %v, frozen %v", hist, frozen)
			}
			if ok, _ := s.Status(ctx, "bo", day(y0+1, 5, 10)); ok {
				t.Fatal("a frozen day reads as signed")
			}
		})
	})
}

// A sign-in that arrives late — a server clock behind, a queued request —
// for a day a sweep already froze turns it into a signed day and gives the
// freeze back.
func TestLateSignInFillsFrozenDay(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		ctx := context.Background()
		clk := &testenv.Clock{}
		s := newService(t, testenv.NewRedis(t), clk, signin.Config{Layout: l})
		for d := 1; d <= 2; d++ {
			clk.Set(noon(day(y0+1, 6, d)))
			s.Sign(ctx, "cy", clk.Now())
		}
		s.AddFreezes(ctx, "cy", 1, "g1")
		clk.Set(noon(day(y0+1, 6, 4)))
		if got, _ := s.ApplyFreezes(ctx, "cy"); fmt.Sprint(got) != fmt.Sprint([]signin.Date{day(y0+1, 6, 3)}) {
			t.Fatalf("sweep froze %v", got)
		}
		res, err := s.Sign(ctx, "cy", noon(day(y0+1, 6, 3)).Add(11*time.Hour))
		if err != nil || res.AlreadySigned || res.Streak != 3 || res.Points != 10 {
			t.Fatalf("late sign-in: %+v, %v", res, err)
		}
		if st, _ := s.Stats(ctx, "cy"); st != (signin.Stats{Current: 3, Longest: 3, Total: 3, Freezes: 1}) {
			t.Fatalf("stats %+v", st)
		}
	})
}

// A user signed in by the previous version (no streak state) keeps the
// streak, the longest run and the total of the days Redis holds.
func TestStateFromOlderVersion(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		ctx := context.Background()
		r := testenv.NewRedis(t)
		clk := &testenv.Clock{}
		s := newService(t, r, clk, signin.Config{Layout: l})
		for _, d := range []int{1, 2, 3, 4, 6, 7} {
			clk.Set(noon(day(y0+1, 12, 24+d)))
			s.Sign(ctx, "old", clk.Now())
		}
		// What the previous version left: the days, no state.
		for _, pattern := range []string{"*}:st:*", "*}:ps:*"} {
			testenv.DeleteKeys(ctx, r.Client, r.Namespace+pattern)
		}
		if st, _ := s.Stats(ctx, "old"); st != (signin.Stats{Current: 2, Longest: 4, Total: 6}) {
			t.Fatalf("stats from the days alone: %+v", st)
		}
		clk.Set(noon(day(y0+2, 1, 1)))
		if res, err := s.Sign(ctx, "old", clk.Now()); err != nil || res.Streak != 3 {
			t.Fatalf("next sign-in: %+v, %v", res, err)
		}
		if st, _ := s.Stats(ctx, "old"); st != (signin.Stats{Current: 3, Longest: 4, Total: 7}) {
			t.Fatalf("stats %+v", st)
		}
	})
}

// Many goroutines sign one user in on one day after a gap, through a proxy
// that drops replies (go-redis sends again), and grant the same freeze id:
// the day is signed once, the gap frozen once, the grant added once.
func TestConcurrentSignsSpendFreezesOnce(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		ctx := context.Background()
		r, proxy := testenv.NewFaultyRedis(t)
		clk := &testenv.Clock{}
		s := newService(t, r, clk, signin.Config{Layout: l, MaxFreezes: 5})
		clk.Set(noon(day(y0+1, 8, 1)))
		if _, err := s.Sign(ctx, "dee", clk.Now()); err != nil {
			t.Fatal(err)
		}
		var added atomic.Int64
		var wg sync.WaitGroup
		proxy.DropReplies(3)
		for range 20 {
			wg.Go(func() {
				n, err := s.AddFreezes(ctx, "dee", 3, "order-1")
				if err != nil {
					t.Error(err)
				}
				added.Store(int64(n))
			})
		}
		wg.Wait()
		if st, _ := s.Stats(ctx, "dee"); st.Freezes != 3 {
			t.Fatalf("20 grants of one id: %d freezes, want 3", st.Freezes)
		}
		clk.Set(noon(day(y0+1, 8, 4))) // days 2 and 3 missed
		var fresh, frozen atomic.Int64
		proxy.DropReplies(5)
		for range 100 {
			wg.Go(func() {
				res, err := s.Sign(ctx, "dee", clk.Now())
				if err != nil {
					t.Error(err)
					return
				}
				if !res.AlreadySigned {
					fresh.Add(1)
				}
				frozen.Add(int64(len(res.Frozen)))
				if res.Streak != 2 {
					t.Errorf("streak %d, want 2", res.Streak)
				}
			})
		}
		wg.Wait()
		if proxy.Cuts() == 0 {
			t.Fatal("no reply was dropped")
		}
		if fresh.Load() > 1 || frozen.Load() > 2 {
			t.Fatalf("%d fresh sign-ins, %d days reported frozen", fresh.Load(), frozen.Load())
		}
		if st, _ := s.Stats(ctx, "dee"); st != (signin.Stats{Current: 2, Longest: 2, Total: 2, Freezes: 1, FrozenDays: 2}) {
			t.Fatalf("stats %+v", st)
		}
		if n := outboxEntries(t, r, s); n != 2 {
			t.Fatalf("%d reward tasks, want 2", n)
		}
	})
}

// Bad configuration and bad input are refused with a clear error, and
// change nothing.
func TestFreezeBadInput(t *testing.T) {
	r := testenv.NewRedis(t)
	for _, cfg := range []signin.Config{{DayStart: -time.Second}, {DayStart: 24 * time.Hour}, {MaxFreezes: -1}, {MaxFreezes: 366}} {
		if _, err := signin.New(r.Client, cfg); !errors.Is(err, signin.ErrConfig) {
			t.Errorf("New(%+v): %v, want ErrConfig", cfg, err)
		}
	}
	ctx := context.Background()
	s := newService(t, r, testenv.NewClock(testenv.Now()), signin.Config{})
	for _, c := range []struct {
		user, grant string
		n           int
	}{{"ann", "g", 0}, {"ann", "g", -1}, {"ann", "", 1}, {"ann", "a b", 1}, {"", "g", 1}, {"名字", "g", 1}} {
		if _, err := s.AddFreezes(ctx, c.user, c.n, c.grant); err == nil {
			t.Errorf("AddFreezes(%q, %d, %q) accepted", c.user, c.n, c.grant)
		}
	}
	if _, err := s.Stats(ctx, ""); !errors.Is(err, signin.ErrInvalidUser) {
		t.Errorf("Stats of an empty id: %v", err)
	}
	if _, err := s.ApplyFreezes(ctx, "a b"); !errors.Is(err, signin.ErrInvalidUser) {
		t.Errorf("ApplyFreezes of a bad id: %v", err)
	}
	if keys, _ := r.Client.Keys(ctx, r.Namespace+"*").Result(); len(keys) != 0 {
		t.Fatalf("refused calls wrote %v", keys)
	}
}

// A sign-in for a day whose year has expired is refused and changes
// nothing, however often it is sent: its bit would expire as it was set and
// the day would count again on every call.
func TestSignInExpiredYearRefused(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		ctx := context.Background()
		r := testenv.NewRedis(t)
		clk := &testenv.Clock{}
		clk.Set(noon(day(y0+4, 6, 1)))
		s := newService(t, r, clk, signin.Config{Layout: l})
		if _, err := s.Sign(ctx, "old", clk.Now()); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if res, err := s.Sign(ctx, "old", noon(day(y0+1, 12, 31))); !errors.Is(err, signin.ErrOutsideWindow) {
				t.Fatalf("a sign-in for a day three years back: %+v, %v; want ErrOutsideWindow", res, err)
			}
		}
		if st, err := s.Stats(ctx, "old"); err != nil || st.Total != 1 || st.Longest != 1 {
			t.Fatalf("stats after refused sign-ins: %+v, %v", st, err)
		}
		if _, err := s.Sign(ctx, "old", noon(day(y0+2, 1, 1))); err != nil {
			t.Fatalf("the oldest kept year: %v", err)
		}
	})
}
