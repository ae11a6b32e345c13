package signin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// isSet reads bit k of a Redis bitmap: bit 0 is the most significant bit of
// byte 0, as SETBIT numbers them.
func isSet(bitmap []byte, k int64) bool {
	i := k / 8
	return i < int64(len(bitmap)) && bitmap[i]&(0x80>>(k%8)) != 0
}

// Status reports whether user signed in on day.
func (s *Service) Status(ctx context.Context, user string, day Date) (bool, error) {
	ctx, call := s.obs.status.Start(ctx)
	if err := s.checkUser(user); err != nil {
		return false, call.End(err)
	}
	days, err := s.years(ctx, user, day.Year, day.Year, false)
	if err != nil {
		return false, call.End(err)
	}
	return days.signed(day), call.End(nil)
}

// userDays are a user's signed and frozen days of some years.
type userDays struct{ signedYears, frozenYears map[int][]byte }

func (u userDays) signed(d Date) bool  { return isSet(u.signedYears[d.Year], d.offset()) }
func (u userDays) frozen(d Date) bool  { return isSet(u.frozenYears[d.Year], d.offset()) }
func (u userDays) covered(d Date) bool { return u.signed(d) || u.frozen(d) }

// years reads user's signed (and if frozen, frozen) days of years from..to,
// and checks the bucket's layout, in one pipeline.
func (s *Service) years(ctx context.Context, user string, from, to int, frozen bool) (userDays, error) {
	pipe := s.rdb.Pipeline()
	layout := pipe.Get(ctx, s.layoutKey(user))
	signedCmds, frozenCmds := map[int]*redis.StringCmd{}, map[int]*redis.StringCmd{}
	for y := from; y <= to; y++ {
		signedCmds[y] = s.readUser(ctx, pipe, user, s.year(user, y))
		if frozen {
			frozenCmds[y] = s.readUser(ctx, pipe, user, s.frozenYear(user, y))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return userDays{}, fmt.Errorf("signin: read user-years: %w", err)
	}
	if err := s.checkLayout(layout); err != nil {
		return userDays{}, err
	}
	bits := func(cmds map[int]*redis.StringCmd) map[int][]byte {
		out := map[int][]byte{}
		for y, c := range cmds {
			out[y], _ = c.Bytes()
		}
		return out
	}
	return userDays{bits(signedCmds), bits(frozenCmds)}, nil
}

// History returns the days user signed in on, from..to inclusive, in order
// (frozen days are not signed: see FrozenDays).
func (s *Service) History(ctx context.Context, user string, from, to Date) ([]Date, error) {
	ctx, call := s.obs.history.Start(ctx)
	days, err := s.daysIn(ctx, user, from, to, userDays.signed)
	return days, call.End(err)
}

// FrozenDays returns the missed days freezes covered, from..to inclusive,
// in order.
func (s *Service) FrozenDays(ctx context.Context, user string, from, to Date) ([]Date, error) {
	ctx, call := s.obs.frozenDays.Start(ctx)
	days, err := s.daysIn(ctx, user, from, to, userDays.frozen)
	return days, call.End(err)
}

func (s *Service) daysIn(ctx context.Context, user string, from, to Date, is func(userDays, Date) bool) ([]Date, error) {
	if err := s.checkUser(user); err != nil {
		return nil, err
	}
	if to.Before(from) || daysBetween(from, to) > 3*366 {
		return nil, invalid(fmt.Errorf("signin: days %s..%s (at most three years, in order)", from, to))
	}
	days, err := s.years(ctx, user, from.Year, to.Year, true)
	if err != nil {
		return nil, err
	}
	var out []Date
	for d := from; !to.Before(d); d = d.AddDays(1) {
		if is(days, d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// Streak returns the streak recorded at `at`: the signed days of the run
// ending on the day `at` counts for (DayOf), or ending the day before if
// that day is neither signed nor frozen (the streak is not broken before
// the day is over). Frozen days keep the run going and do not count. Runs
// are counted back at most two calendar years before this year. Unlike
// Stats.Current it does not count freezes not yet applied to missed days.
func (s *Service) Streak(ctx context.Context, user string, at time.Time) (int, error) {
	ctx, call := s.obs.streak.Start(ctx)
	n, err := s.streak(ctx, user, at)
	return n, call.End(err)
}

func (s *Service) streak(ctx context.Context, user string, at time.Time) (int, error) {
	if err := s.checkUser(user); err != nil {
		return 0, err
	}
	d := s.DayOf(user, at)
	oldest := d.Year - 2
	days, err := s.years(ctx, user, oldest, d.Year, true)
	if err != nil {
		return 0, err
	}
	if !days.covered(d) {
		d = d.AddDays(-1)
	}
	n := 0
	for ; d.Year >= oldest && days.covered(d); d = d.AddDays(-1) {
		if days.signed(d) {
			n++
		}
	}
	return n, nil
}

// MonthCount returns how many days of a month user signed in on.
func (s *Service) MonthCount(ctx context.Context, user string, year int, month time.Month) (int, error) {
	ctx, call := s.obs.monthCount.Start(ctx)
	n, err := s.monthCount(ctx, user, year, month)
	return n, call.End(err)
}

func (s *Service) monthCount(ctx context.Context, user string, year int, month time.Month) (int, error) {
	if err := s.checkUser(user); err != nil {
		return 0, err
	}
	days, err := s.years(ctx, user, year, year, false)
	if err != nil {
		return 0, err
	}
	n := 0
	for d := (Date{year, month, 1}); d.Month == month; d = d.AddDays(1) {
		if days.signed(d) {
			n++
		}
	}
	return n, nil
}
