package signin_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/signin"
)

// model is one user's check-ins as the package documents them, kept the
// plain way: a set of signed days and a set of frozen days, and freezes
// spent eagerly, at each day's cut-over, as a clock ticking through every
// day would spend them. The Service spends them lazily, when a call comes;
// the two must never differ.
type model struct {
	loc      *time.Location
	dayStart time.Duration
	every    int
	maxHeld  int
	window   int

	signed, frozen map[int64]bool // day numbers (days since 1970-01-01)
	decided        int64          // the cut-overs of days before it are done
	freezes, cards int
	pending        []int64 // days frozen since the last call that settles
	grants         map[string]bool
	rewards        map[string]int64 // "date kind" → points, once each
}

func newModel(loc *time.Location, dayStart time.Duration, start time.Time) *model {
	m := &model{loc: loc, dayStart: dayStart, every: 7, maxHeld: 3, window: 7,
		signed: map[int64]bool{}, frozen: map[int64]bool{}, grants: map[string]bool{}, rewards: map[string]int64{}}
	m.decided = m.day(start)
	return m
}

// day is the day t counts for: the latest date the local wall clock less
// dayStart has shown in the three hours up to t, looked at minute by
// minute (so a clock set back cannot take the day back).
func (m *model) day(t time.Time) int64 {
	best := int64(-1 << 62)
	for k := range 181 {
		w := t.Add(-time.Duration(k) * time.Minute).In(m.loc)
		wall := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), time.UTC)
		if n := wall.Add(-m.dayStart).Unix() / 86400; n > best {
			best = n
		}
	}
	return best
}

func (m *model) covered(d int64) bool { return m.signed[d] || m.frozen[d] }

// advance runs the cut-overs up to now: a day that ends missed right after
// a covered one takes a freeze, if one is held.
func (m *model) advance(now time.Time) {
	for today := m.day(now); m.decided < today; m.decided++ {
		d := m.decided
		if !m.covered(d) && m.covered(d-1) && m.freezes > 0 {
			m.frozen[d] = true
			m.freezes--
			m.pending = append(m.pending, d)
		}
	}
}

// settled returns the days frozen since the last call that settles.
func (m *model) settled() []signin.Date {
	out := datesOf(m.pending)
	m.pending = nil
	return out
}

// run is the signed days of the covered run ending at d.
func (m *model) run(d int64) int {
	n := 0
	for ; m.covered(d); d-- {
		if m.signed[d] {
			n++
		}
	}
	return n
}

func (m *model) reward(d int64, kind string, points int64) {
	m.rewards[dateOf(d).String()+" "+kind] = points
}

// fill signs day x; it returns the run's signed days and the points.
func (m *model) fill(x int64) (int, int64) {
	if m.frozen[x] {
		delete(m.frozen, x)
		m.freezes = min(m.freezes+1, m.maxHeld)
	}
	m.signed[x] = true
	count, points := m.run(x-1), int64(10)
	m.reward(x, "daily", 10)
	for d := x; ; d++ {
		if m.signed[d] {
			count++
			if count%m.every == 0 {
				m.reward(d, "bonus", 100)
				points += 100
			}
		}
		if !m.covered(d + 1) {
			return count, points
		}
	}
}

func (m *model) sign(now time.Time) signin.Result {
	m.advance(now)
	d := m.day(now)
	frozen := m.settled()
	if m.signed[d] {
		return signin.Result{Date: dateOf(d), AlreadySigned: true, Streak: m.run(d), Frozen: frozen}
	}
	streak, points := m.fill(d)
	return signin.Result{Date: dateOf(d), Streak: streak, Points: points, Frozen: frozen}
}

func (m *model) makeUp(now time.Time, x int64) (signin.Result, error) {
	m.advance(now)
	if back := m.day(now) - x; back < 1 || back > int64(m.window) {
		return signin.Result{}, signin.ErrOutsideWindow
	}
	frozen := m.settled()
	switch {
	case m.signed[x]:
		return signin.Result{}, signin.ErrAlreadySigned
	case m.cards < 1:
		return signin.Result{}, signin.ErrNoCard
	}
	m.cards--
	streak, points := m.fill(x)
	return signin.Result{Date: dateOf(x), Streak: streak, Points: points, Frozen: frozen}, nil
}

func (m *model) addFreezes(now time.Time, n int, grant string) int {
	m.advance(now)
	m.settled()
	if !m.grants[grant] {
		m.grants[grant] = true
		m.freezes = min(m.freezes+n, m.maxHeld)
	}
	return m.freezes
}

func (m *model) stats(now time.Time) signin.Stats {
	m.advance(now)
	st := signin.Stats{Freezes: m.freezes, FrozenDays: len(m.frozen), Total: len(m.signed)}
	today := m.day(now)
	switch {
	case m.covered(today):
		st.Current = m.run(today)
	case m.covered(today - 1):
		st.Current = m.run(today - 1)
	}
	for _, days := range []map[int64]bool{m.signed, m.frozen} {
		for d := range days {
			if !m.covered(d + 1) { // a run ends at d
				st.Longest = max(st.Longest, m.run(d))
			}
		}
	}
	return st
}

// streak is what Streak reads once the days before today are settled.
func (m *model) streak(now time.Time) int {
	d := m.day(now)
	if !m.covered(d) {
		d--
	}
	return m.run(d)
}

func (m *model) points() (sum int64) {
	for _, p := range m.rewards {
		sum += p
	}
	return sum
}

func dateOf(n int64) signin.Date { return signin.DateOf(time.Unix(n*86400, 0), time.UTC) }

func datesOf(days []int64) []signin.Date {
	var out []signin.Date
	for _, d := range days {
		out = append(out, dateOf(d))
	}
	return out
}

// modelZones: a zone behind UTC and one ahead by a half hour without DST,
// one with DST at 01:00 UTC, and Lord Howe, whose clock moves by 30 minutes.
var modelZones = []string{"America/New_York", "Europe/London", "Asia/Kolkata", "Australia/Lord_Howe"}

// instants are the moments the model test acts for one user over the span
// from..to: a little before and after each day's cut-over (DayStart in the
// user's zone), around every DST change, and at random in each day.
func instants(rng *rand.Rand, loc *time.Location, dayStart time.Duration, from, to time.Time) []time.Time {
	var out []time.Time
	for d := from.In(loc); d.Before(to); d = d.AddDate(0, 0, 1) {
		cut := time.Date(d.Year(), d.Month(), d.Day(), int(dayStart.Hours()), int(dayStart.Minutes())%60, 0, 0, loc)
		for _, off := range []time.Duration{-90 * time.Second, -time.Second, 0, 40 * time.Second, 25 * time.Minute} {
			if rng.IntN(3) == 0 {
				out = append(out, cut.Add(off))
			}
		}
		out = append(out, cut.Add(time.Duration(rng.Int64N(int64(24*time.Hour)))))
	}
	for t := from; t.Before(to); {
		_, end := t.In(loc).ZoneBounds()
		if end.IsZero() || !end.Before(to) {
			break
		}
		for _, off := range []time.Duration{-time.Minute, 0, time.Minute, 16 * time.Minute, 31 * time.Minute, 59 * time.Minute, 61 * time.Minute} {
			out = append(out, end.Add(off))
		}
		t = end
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

type modelUser struct {
	name  string
	svc   *signin.Service
	m     *model
	grant int
	lazy  bool // in a phase of missing days
}

type event struct {
	at time.Time
	u  *modelUser
}

// Two years of sign-ins, make-ups, card and freeze grants, sweeps and
// retried grants for users in four zones under two DayStarts that lie in
// DST changes (01:45, in the hour New York, London and Lord Howe repeat in
// autumn and London skips in spring; 02:15, skipped by New York and Lord
// Howe in spring), at instants near every cut-over and DST change: after
// every step the Service's answer and Stats equal the model's, Streak
// equals it once the step has settled, History and FrozenDays equal it at
// the end, and the ledger holds exactly the model's rewards.
//
// The whole two years run once, on the first layout and a single Redis; the
// other layout and the cluster run the first 130 days (a year's end and,
// from any start, at least one DST change), which keeps the package's share of CI's
// race passes to about a minute instead of five.
func TestModelFreezesAndCutOver(t *testing.T) {
	eachLayout(t, func(t *testing.T, l signin.Layout) {
		testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
			days := 130
			if l == layouts[0] && strings.HasSuffix(t.Name(), "/redis") && !testing.Short() {
				days = 2 * 365
			}
			runModel(t, r, l, days)
		})
	})
}

func runModel(t *testing.T, r *testenv.Redis, l signin.Layout, days int) {
	ctx := context.Background()
	clk := &testenv.Clock{}
	start := testenv.Now().Truncate(time.Hour)
	end := start.AddDate(0, 0, days)
	rng := rand.New(rand.NewPCG(uint64(l)+7, 11))
	var users []*modelUser
	var events []event
	for i, dayStart := range []time.Duration{time.Hour + 45*time.Minute, 2*time.Hour + 15*time.Minute} {
		zones := map[string]*time.Location{}
		cfg := signin.Config{Layout: l, Buckets: 4, DayStart: dayStart, MaxFreezes: 3, BonusEvery: 7,
			UserLocation: func(u string) *time.Location { return zones[u] }}
		s := newService(t, r, clk, cfg)
		for _, zone := range modelZones {
			loc, err := time.LoadLocation(zone)
			if err != nil {
				t.Fatal(err)
			}
			u := &modelUser{name: fmt.Sprintf("%s/%d", zone, i), svc: s, m: newModel(loc, dayStart, start)}
			zones[u.name] = loc
			users = append(users, u)
			for _, at := range instants(rng, loc, dayStart, start, end) {
				events = append(events, event{at, u})
			}
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return a.at.Compare(b.at) })

	ledger, _ := newLedger(t)
	tasks := &testenv.Published{}
	var relays []*outbox.Relay // one per Service
	for _, u := range users {
		if len(relays) == 0 || u.svc != users[len(relays)*len(modelZones)-1].svc {
			relays = append(relays, outbox.NewRelay(r.Client, u.svc.Outboxes(), "rewards", tasks))
		}
	}
	deliver := func() {
		for _, rl := range relays {
			if _, err := rl.DrainAll(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range tasks.Take() {
			if err := ledger.Handle(ctx, m.Key, m.Value); err != nil {
				t.Fatal(err)
			}
		}
	}

	for i, ev := range events {
		clk.Set(ev.at)
		u, m, now := ev.u, ev.u.m, ev.at
		if rng.IntN(60) == 0 {
			u.lazy = !u.lazy
		}
		step := fmt.Sprintf("step %d, %s at %s", i, u.name, now.In(m.loc).Format("2006-01-02 15:04:05 MST"))
		wrote := true
		switch p := rng.IntN(100); {
		case p < 55:
			if u.lazy && rng.IntN(3) > 0 {
				wrote = false
				break
			}
			got, err := u.svc.Sign(ctx, u.name, now)
			want := m.sign(now)
			if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: Sign = %+v, %v; model %+v", step, got, err, want)
			}
		case p < 62:
			x := m.day(now) - 1 - int64(rng.IntN(9))
			got, err := u.svc.MakeUp(ctx, u.name, dateOf(x))
			want, wantErr := m.makeUp(now, x)
			if !errors.Is(err, wantErr) || wantErr == nil && fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: MakeUp(%s) = %+v, %v; model %+v, %v", step, dateOf(x), got, err, want, wantErr)
			}
			wrote = wantErr == nil || !errors.Is(wantErr, signin.ErrOutsideWindow)
		case p < 66:
			if err := u.svc.AddCards(ctx, u.name, 1); err != nil {
				t.Fatal(err)
			}
			m.cards++
			wrote = false
		case p < 72:
			if rng.IntN(4) > 0 || u.grant == 0 {
				u.grant++ // else the last grant again, as a retry
			}
			n, grant := 1+rng.IntN(2), fmt.Sprint("g", u.grant)
			got, err := u.svc.AddFreezes(ctx, u.name, n, grant)
			if want := m.addFreezes(now, n, grant); err != nil || got != want {
				t.Fatalf("%s: AddFreezes(%d, %s) = %d, %v; model %d", step, n, grant, got, err, want)
			}
		case p < 80:
			got, err := u.svc.ApplyFreezes(ctx, u.name)
			m.advance(now)
			if want := m.settled(); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: ApplyFreezes = %v, %v; model %v", step, got, err, want)
			}
		default:
			wrote = false
		}
		got, err := u.svc.Stats(ctx, u.name)
		if want := m.stats(now); err != nil || got != want {
			t.Fatalf("%s: Stats = %+v, %v; model %+v", step, got, err, want)
		}
		if wrote && len(m.pending) == 0 {
			if got, err := u.svc.Streak(ctx, u.name, now); err != nil || got != m.streak(now) {
				t.Fatalf("%s: Streak = %d, %v; model %d", step, got, err, m.streak(now))
			}
		}
		if i%500 == 0 {
			deliver()
		}
	}
	deliver()
	if last := events[len(events)-1].at; last.After(end) {
		end = last
	}
	clk.Set(end)
	for _, u := range users {
		m := u.m
		// Stored days show the freezes once settled.
		got, err := u.svc.ApplyFreezes(ctx, u.name)
		m.advance(end)
		if want := m.settled(); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: final ApplyFreezes = %v, %v; model %v", u.name, got, err, want)
		}
		from, to := m.day(end.AddDate(-1, 0, 0)), m.day(end)
		var wantSigned, wantFrozen []int64
		for d := from; d <= to; d++ {
			if m.signed[d] {
				wantSigned = append(wantSigned, d)
			}
			if m.frozen[d] {
				wantFrozen = append(wantFrozen, d)
			}
		}
		hist, err1 := u.svc.History(ctx, u.name, dateOf(from), dateOf(to))
		frozen, err2 := u.svc.FrozenDays(ctx, u.name, dateOf(from), dateOf(to))
		if err1 != nil || err2 != nil || fmt.Sprint(hist) != fmt.Sprint(datesOf(wantSigned)) || fmt.Sprint(frozen) != fmt.Sprint(datesOf(wantFrozen)) {
			t.Fatalf("%s: History %v (%v), FrozenDays %v (%v); model %v and %v", u.name, hist, err1, frozen, err2, datesOf(wantSigned), datesOf(wantFrozen))
		}
		bal, _ := ledger.Balance(ctx, u.name)
		rows, _ := ledger.Entries(ctx, u.name)
		if bal != m.points() || rows != len(m.rewards) {
			t.Fatalf("%s: ledger %d points in %d rows; model %d in %d", u.name, bal, rows, m.points(), len(m.rewards))
		}
		st := m.stats(end)
		t.Logf("%s: %+v", u.name, st)
		if !testing.Short() && (st.FrozenDays == 0 || days >= 365 && st.Longest < 14) {
			t.Errorf("%s: the run exercised too little: %+v", u.name, st)
		}
	}
}
