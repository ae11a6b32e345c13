package shortlink

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Point is a link's clicks in one step of a Clicks series.
type Point struct {
	Start  time.Time `json:"start"`  // the step's first instant, UTC
	Clicks int64     `json:"clicks"` // by people: bots excluded
	Bots   int64     `json:"bots"`   // by bots (DeviceBot), counted apart
}

// Count is a value of a dimension and its clicks, a row of a Breakdown.
type Count struct {
	Value  string `json:"value"`
	Clicks int64  `json:"clicks"` // by people
	Bots   int64  `json:"bots"`   // by bots
}

// Bounds of the analytics queries.
const (
	// MaxPoints bounds a Clicks series, and a Breakdown's range in hours
	// (or in days, for a range of whole UTC days).
	MaxPoints = 10_000
	// MaxBreakdown is the largest n of a Breakdown.
	MaxBreakdown = 100
)

// Clicks returns code's clicks from from to to (to excluded) in steps of
// step, time.Hour or 24*time.Hour (UTC days): one Point per step, those
// with no clicks included as zeros, the first starting at from rounded
// down to the step, the last before to. Clicks are read from SQL, so the
// last FlushEvery's are not there yet. Bad arguments are
// ErrInvalidOptions; an unknown code is ErrNotFound.
func (s *Service) Clicks(ctx context.Context, code string, from, to time.Time, step time.Duration) ([]Point, error) {
	ctx, call := s.obs.clicks.Start(ctx)
	ps, err := s.clicksSeries(ctx, code, from, to, step, false, "")
	return ps, call.End(err)
}

// Breakdown returns the n values of dim with the most clicks by people on
// code from from to to (to excluded; rounded out to whole hours), most
// first (then most bots, then by value); values only bots clicked come
// last. A range of whole UTC days is read from the daily rollup. Bad
// arguments are ErrInvalidOptions; an unknown code is ErrNotFound.
func (s *Service) Breakdown(ctx context.Context, code string, dim Dimension, from, to time.Time, n int) ([]Count, error) {
	ctx, call := s.obs.breakdown.Start(ctx)
	cs, err := s.breakdown(ctx, code, dim, from, to, n, false, "")
	return cs, call.End(err)
}

// Uniques returns an estimate (HyperLogLog: 0.81% standard error) of the
// distinct visitors — client IP and User-Agent, bots excluded — of code
// on the UTC day holding day, as flushed so far. Only redirects that carry
// a client IP (the handler's, or ResolveOptions.ClientIP) count; a day
// older than Config.UniquesTTL is 0.
func (s *Service) Uniques(ctx context.Context, code string, day time.Time) (int64, error) {
	ctx, call := s.obs.uniques.Start(ctx)
	n, err := s.uniques(ctx, code, day, false, "")
	return n, call.End(err)
}

// checkRange validates a query's range in steps of step and returns its
// first and last-plus-one bucket (Unix seconds).
func checkRange(from, to time.Time, step time.Duration) (int64, int64, error) {
	switch {
	case from.IsZero() || to.IsZero():
		return 0, 0, fmt.Errorf("%w: a range needs both from and to", ErrInvalidOptions)
	case from.After(to):
		return 0, 0, fmt.Errorf("%w: from %v is after to %v", ErrInvalidOptions, from.UTC(), to.UTC())
	}
	first := from.Truncate(step)
	span := to.Sub(first) // saturates, for ranges past 292 years
	steps := span / step
	if span%step != 0 {
		steps++
	}
	if steps > MaxPoints {
		return 0, 0, fmt.Errorf("%w: range %v..%v is more than %d steps of %v", ErrInvalidOptions, from.UTC(), to.UTC(), MaxPoints, step)
	}
	return first.Unix(), first.Add(steps * step).Unix(), nil
}

func periodOf(step time.Duration) (int, error) {
	switch step {
	case time.Hour:
		return periodHour, nil
	case 24 * time.Hour:
		return periodDay, nil
	}
	return 0, fmt.Errorf("%w: step %v (1h or 24h)", ErrInvalidOptions, step)
}

// owned checks that code is a link (of owner, when owned).
func (s *Service) ownedLink(ctx context.Context, code string, owned bool, owner string) error {
	if !s.validKey(code) {
		return ErrNotFound
	}
	r, err := s.load(ctx, code)
	if err == nil && owned && r.Owner != owner {
		err = ErrNotFound
	}
	return err
}

// selectRollup checks the range [from, to) in steps of step (1h or 24h)
// and that code is a link (of owner, when owned), then reads into dest the
// columns cols of the link's rollup rows of that period in the range that
// meet cond (its placeholders bound to args), grouped as groupBy says. It
// returns the range's first bucket and its end, in Unix seconds.
func (s *Service) selectRollup(ctx context.Context, dest any, code string, from, to time.Time, step time.Duration, owned bool, owner, cols, cond, groupBy string, args ...any) (first, end int64, err error) {
	period, err := periodOf(step)
	if err != nil {
		return 0, 0, err
	}
	if first, end, err = checkRange(from, to, step); err != nil {
		return 0, 0, err
	}
	if err := s.ownedLink(ctx, code, owned, owner); err != nil {
		return 0, 0, err
	}
	sh := s.router.ByKey(code)
	err = sh.DB.SelectContext(ctx, dest, "SELECT "+cols+" FROM "+sh.Table+clicksSuffix+
		" WHERE code = ? AND period = ? AND bucket >= ? AND bucket < ? AND "+cond+groupBy,
		append([]any{code, period, first, end}, args...)...)
	if err != nil {
		return 0, 0, fmt.Errorf("shortlink: read %s%s: %w", sh.Table, clicksSuffix, err)
	}
	return first, end, nil
}

func (s *Service) clicksSeries(ctx context.Context, code string, from, to time.Time, step time.Duration, owned bool, owner string) ([]Point, error) {
	if _, err := periodOf(step); err != nil {
		return nil, err
	}
	var rows []struct {
		Bucket int64 `db:"bucket"`
		Bot    int   `db:"bot"`
		N      int64 `db:"n"`
	}
	first, end, err := s.selectRollup(ctx, &rows, code, from, to, step, owned, owner, "bucket, bot, n", "dim = 0", "")
	if err != nil {
		return nil, err
	}
	sec := int64(step / time.Second)
	points := make([]Point, (end-first)/sec)
	for i := range points {
		points[i].Start = time.Unix(first+int64(i)*sec, 0).UTC()
	}
	for _, r := range rows {
		p := &points[(r.Bucket-first)/sec]
		if r.Bot == 0 {
			p.Clicks += r.N
		} else {
			p.Bots += r.N
		}
	}
	return points, nil
}

func (s *Service) breakdown(ctx context.Context, code string, dim Dimension, from, to time.Time, n int, owned bool, owner string) ([]Count, error) {
	d := dimIndex(dim)
	switch {
	case d < 0:
		return nil, fmt.Errorf("%w: dimension %.64q (referrer, device, country, utm_source, utm_medium or utm_campaign)", ErrInvalidOptions, dim)
	case n < 1 || n > MaxBreakdown:
		return nil, fmt.Errorf("%w: breakdown size %d outside 1..%d", ErrInvalidOptions, n, MaxBreakdown)
	}
	step := time.Hour
	if from.Equal(from.Truncate(24*time.Hour)) && to.Equal(to.Truncate(24*time.Hour)) {
		step = 24 * time.Hour
	}
	var rows []struct {
		Dim   int    `db:"dim"`
		Value string `db:"value"`
		Bot   int    `db:"bot"`
		N     int64  `db:"n"`
	}
	// With the totals (dim 0), for a UTM dimension's derived ValueNone.
	if _, _, err := s.selectRollup(ctx, &rows, code, from, to, step, owned, owner, "dim, value, bot, SUM(n) AS n",
		"dim IN (0, ?)", " GROUP BY dim, value, bot", d+1); err != nil {
		return nil, err
	}
	byValue := map[string]*Count{}
	var counts []*Count
	var rest tally // the total, less every value's
	for _, r := range rows {
		if r.Dim == 0 {
			rest[r.Bot] += r.N
			continue
		}
		rest[r.Bot] -= r.N
		c := byValue[r.Value]
		if c == nil {
			c = &Count{Value: r.Value}
			byValue[r.Value] = c
			counts = append(counts, c)
		}
		if r.Bot == 0 {
			c.Clicks += r.N
		} else {
			c.Bots += r.N
		}
	}
	if derived(d+1, ValueNone) && rest != (tally{}) {
		counts = append(counts, &Count{Value: ValueNone, Clicks: rest[0], Bots: rest[1]})
	}
	slices.SortFunc(counts, func(x, y *Count) int {
		return cmp.Or(cmp.Compare(y.Clicks, x.Clicks), cmp.Compare(y.Bots, x.Bots), strings.Compare(x.Value, y.Value))
	})
	out := make([]Count, 0, min(n, len(counts)))
	for _, c := range counts[:min(n, len(counts))] {
		out = append(out, *c)
	}
	return out, nil
}

func (s *Service) uniques(ctx context.Context, code string, day time.Time, owned bool, owner string) (int64, error) {
	if day.IsZero() {
		return 0, fmt.Errorf("%w: Uniques needs a day", ErrInvalidOptions)
	}
	if err := s.ownedLink(ctx, code, owned, owner); err != nil {
		return 0, err
	}
	n, err := s.rdb.PFCount(ctx, s.uniquesKey(code, day.Truncate(24*time.Hour).Unix())).Result()
	if err != nil {
		return 0, fmt.Errorf("shortlink: count unique visitors: %w", err)
	}
	return n, nil
}
