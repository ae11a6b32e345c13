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
	if err := s.checkUser(user); err != nil {
		return false, err
	}
	years, err := s.years(ctx, user, day.Year, day.Year)
	if err != nil {
		return false, err
	}
	return isSet(years[day.Year], day.offset()), nil
}

// years reads user's years from..to, and checks the bucket's layout, in
// one pipeline.
func (s *Service) years(ctx context.Context, user string, from, to int) (map[int][]byte, error) {
	pipe := s.rdb.Pipeline()
	layout := pipe.Get(ctx, s.layoutKey(user))
	cmds := map[int]*redis.StringCmd{}
	for y := from; y <= to; y++ {
		cmds[y] = s.readYear(ctx, pipe, user, y)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("signin: read user-years: %w", err)
	}
	if err := s.checkLayout(layout); err != nil {
		return nil, err
	}
	out := map[int][]byte{}
	for y, c := range cmds {
		b, _ := c.Bytes()
		out[y] = b
	}
	return out, nil
}

// History returns the days user signed in on, from..to inclusive, in order.
func (s *Service) History(ctx context.Context, user string, from, to Date) ([]Date, error) {
	if err := s.checkUser(user); err != nil {
		return nil, err
	}
	if to.Before(from) || daysBetween(from, to) > 3*366 {
		return nil, fmt.Errorf("signin: history %s..%s (at most three years, in order)", from, to)
	}
	bitmaps, err := s.years(ctx, user, from.Year, to.Year)
	if err != nil {
		return nil, err
	}
	var out []Date
	for d := from; !to.Before(d); d = d.AddDays(1) {
		if isSet(bitmaps[d.Year], d.offset()) {
			out = append(out, d)
		}
	}
	return out, nil
}

// Streak returns user's current streak at `at`: the run of consecutive
// signed days ending today, or ending yesterday if today is not signed yet
// (the streak is not broken before the day is over). Runs are counted back
// at most two calendar years before this year, as Sign counts them.
func (s *Service) Streak(ctx context.Context, user string, at time.Time) (int, error) {
	if err := s.checkUser(user); err != nil {
		return 0, err
	}
	d := DateOf(at, s.location(user))
	oldest := d.Year - 2
	bitmaps, err := s.years(ctx, user, oldest, d.Year)
	if err != nil {
		return 0, err
	}
	if !isSet(bitmaps[d.Year], d.offset()) {
		d = d.AddDays(-1)
	}
	n := 0
	for ; d.Year >= oldest && isSet(bitmaps[d.Year], d.offset()); d = d.AddDays(-1) {
		n++
	}
	return n, nil
}

// MonthCount returns how many days of a month user signed in on.
func (s *Service) MonthCount(ctx context.Context, user string, year int, month time.Month) (int, error) {
	if err := s.checkUser(user); err != nil {
		return 0, err
	}
	years, err := s.years(ctx, user, year, year)
	if err != nil {
		return 0, err
	}
	n := 0
	for d := (Date{year, month, 1}); d.Month == month; d = d.AddDays(1) {
		if isSet(years[year], d.offset()) {
			n++
		}
	}
	return n, nil
}
