package signin

import (
	"context"
	"fmt"
	"time"
)

// grantMemory is how long a freeze grant id is remembered: a grant
// repeated within it (a retry) adds nothing.
const grantMemory = 30 * 24 * time.Hour

// Stats are a user's statistics as of today.
type Stats struct {
	// Current is the signed days of the streak still alive: the run
	// ending today, or yesterday while today is not over, counting missed
	// days the freezes held will cover as frozen. Zero once broken.
	Current int `json:"current"`
	// Longest is the most signed days of any run, ever (kept with the
	// streak, not recomputed from the days Redis still holds).
	Longest int `json:"longest"`
	// Total is the days signed, ever; frozen days are not counted.
	Total int `json:"total"`
	// Freezes is how many freezes the user holds.
	Freezes int `json:"freezes"`
	// FrozenDays is how many missed days freezes have covered and that
	// are still frozen: a frozen day later signed (MakeUp, a late Sign)
	// counts as signed instead, and its freeze came back.
	FrozenDays int `json:"frozen_days"`
}

// dayCall returns the KEYS and ARGV[1..16] of a day script (days.lua) on
// user's years base..base+3, with extra as KEYS[12] and day as ARGV[16].
func (s *Service) dayCall(user string, base int, extra string, day Date) ([]string, []any) {
	keys := make([]string, 0, 12)
	for y := base; y < base+4; y++ {
		keys = append(keys, s.year(user, y))
	}
	for y := base; y < base+4; y++ {
		keys = append(keys, s.frozenYear(user, y))
	}
	keys = append(keys, s.stateKey(user), s.layoutKey(user), s.outbox(user), extra)
	args := []any{user, s.layoutName()}
	for y := base; y <= base+4; y++ {
		args = append(args, dayNumber(Date{y, time.January, 1}))
	}
	for y := base; y < base+4; y++ {
		args = append(args, expiry(y))
	}
	args = append(args, s.cfg.DailyPoints, s.cfg.BonusPoints, s.cfg.BonusEvery, s.cfg.MaxFreezes, dayNumber(day))
	return keys, args
}

// AddFreezes gives user n freezes, up to Config.MaxFreezes (the excess is
// lost), and returns how many the user holds. grant names the grant (an
// order id, "welcome-bonus"): a grant id seen in the last 30 days adds
// nothing, so a retried call — by go-redis after a lost reply, or by the
// caller — adds once. The days before today are settled first with the
// freezes held until now: a freeze granted today never covers a day already
// over. n < 1, or a grant id that is empty, over 128 bytes or holds a byte
// outside 0x21–0x7E, is an error and changes nothing.
func (s *Service) AddFreezes(ctx context.Context, user string, n int, grant string) (int, error) {
	ctx, call := s.obs.addFreezes.Start(ctx)
	held, err := s.addFreezes(ctx, user, n, grant)
	return held, call.End(err)
}

func (s *Service) addFreezes(ctx context.Context, user string, n int, grant string) (int, error) {
	if err := s.checkUser(user); err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, invalid(fmt.Errorf("signin: add %d freezes (at least 1)", n))
	}
	if grant == "" || len(grant) > 128 || validUser(grant) != nil {
		return 0, invalid(fmt.Errorf("signin: freeze grant id %q (1..128 bytes of visible ASCII, 0x21-0x7e)", grant))
	}
	today := s.Today(user)
	keys, args := s.dayCall(user, today.Year-2, s.grants(user), today)
	v, err := freezeScript.Run(ctx, s.rdb, keys, append(args, n, grant, grantMemory.Milliseconds())...).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("signin: add freezes for %s: %w", user, scriptErr(err))
	}
	return int(v[1]), nil
}

// ApplyFreezes settles user's days before today now, covering missed days
// with the freezes held, and returns the days it froze. Every call that
// writes settles the same way, and Stats counts what settling would do, so
// a sweep is never needed for correctness: a cron calls it to notify users
// or to keep stored state current. Repeating it freezes nothing twice — and
// so a repeat sent after a lost reply answers no days: notify from
// FrozenDays(user, from, to), which reads what is stored, not from the
// answer alone.
func (s *Service) ApplyFreezes(ctx context.Context, user string) ([]Date, error) {
	ctx, call := s.obs.applyFreezes.Start(ctx)
	days, err := s.applyFreezes(ctx, user)
	return days, call.End(err)
}

func (s *Service) applyFreezes(ctx context.Context, user string) ([]Date, error) {
	if err := s.checkUser(user); err != nil {
		return nil, err
	}
	today := s.Today(user)
	keys, args := s.dayCall(user, today.Year-2, s.stateKey(user), today)
	v, err := sweepScript.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("signin: apply freezes for %s: %w", user, scriptErr(err))
	}
	return dates(v), nil
}

// Stats returns user's statistics as of today (Config.Now), writing
// nothing.
func (s *Service) Stats(ctx context.Context, user string) (Stats, error) {
	ctx, call := s.obs.stats.Start(ctx)
	st, err := s.stats(ctx, user)
	return st, call.End(err)
}

func (s *Service) stats(ctx context.Context, user string) (Stats, error) {
	if err := s.checkUser(user); err != nil {
		return Stats{}, err
	}
	today := s.Today(user)
	keys, args := s.dayCall(user, today.Year-2, s.stateKey(user), today)
	v, err := statsScript.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return Stats{}, fmt.Errorf("signin: stats of %s: %w", user, scriptErr(err))
	}
	return Stats{Current: int(v[0]), Longest: int(v[1]), Total: int(v[2]), Freezes: int(v[3]), FrozenDays: int(v[4])}, nil
}
