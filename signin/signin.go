package signin

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/keys"
)

var (
	//go:embed bits.lua
	bitsLua string
	//go:embed sign.lua
	signLua string
	//go:embed makeup.lua
	makeupLua string
	//go:embed restore.lua
	restoreLua string

	signScript    = redis.NewScript(bitsLua + signLua)
	makeupScript  = redis.NewScript(bitsLua + makeupLua)
	restoreScript = redis.NewScript(bitsLua + restoreLua)
)

var (
	// ErrNoCard is returned by MakeUp when the user has no make-up card.
	ErrNoCard = errors.New("signin: no make-up card")
	// ErrAlreadySigned is returned by MakeUp for a day already signed,
	// which is also what a make-up whose reply was lost gets when go-redis
	// resends it: the day was made up, and its card spent, once.
	ErrAlreadySigned = errors.New("signin: day already signed")
	// ErrOutsideWindow is returned by MakeUp for today, a future day or a
	// day older than the make-up window.
	ErrOutsideWindow = errors.New("signin: day outside the make-up window")
	// ErrInvalidUser is returned for a user id that is empty, longer than
	// 128 bytes (64 in the Packed layout), or holds a byte outside printable
	// ASCII (what the SQL ledger stores).
	ErrInvalidUser = errors.New("signin: invalid user id")
	// ErrBadTask is a reward task or message that can never be granted.
	ErrBadTask = errors.New("signin: bad reward task")
	// ErrConfig is wrapped by every configuration error.
	ErrConfig = errors.New("signin: bad config")
)

// Config configures a Service. Zero values take the defaults in brackets.
type Config struct {
	// Namespace prefixes every key.
	Namespace string
	// Buckets is how many hash-tag buckets users are spread over [64]. A
	// user's bitmaps and card count share the bucket's tag with its outbox
	// stream, so one script can set a bit and record the reward on a
	// Redis Cluster. Fixed for the life of the data.
	Buckets int
	// Layout is how user-years are stored [Bitmaps]: a key each, or Packed
	// as fields of small hashes, a third of the memory (see the package
	// documentation). Fixed for the life of the data: the first write
	// records it in each bucket, and a Service with another layout gets
	// ErrLayout there. To change it, Backup and Restore into a new
	// namespace.
	Layout Layout
	// Users is how many users Packed sizes its hashes for; required with
	// Packed, unused with Bitmaps. Each bucket's year is split over
	// ceil(Users / Buckets / 64) hashes of about 64 users each. Redis keeps
	// a hash compact up to hash-max-listpack-entries (128 by default), so up
	// to about 1.5 × Users it stays a third of Bitmaps' memory; beyond that
	// more and more hashes become hash tables (more memory than Bitmaps:
	// raise hash-max-listpack-entries, or migrate to a larger sizing).
	// Oversizing costs a key per hash: 10 × too many users leaves hashes
	// of 6 users and about 80 bytes per user-year instead of 60. Fixed for
	// the life of the data, like Buckets (recorded with the layout).
	Users int
	// Location is the time zone days are counted in [UTC]; UserLocation,
	// when set, gives a user's own zone (nil result: Location).
	Location     *time.Location
	UserLocation func(user string) *time.Location
	// DailyPoints for each day signed [10]; BonusPoints on every
	// BonusEvery-th consecutive day [100, 7].
	DailyPoints int64
	BonusPoints int64
	BonusEvery  int
	// MakeUpWindow is how many days back a missed day can be made up [7].
	MakeUpWindow int
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Service is daily check-in on Redis (bitmaps, or packed hashes). It is safe
// for concurrent use.
type Service struct {
	rdb    redis.UniversalClient
	cfg    Config
	space  keys.Space
	hashes int // Packed: hashes per bucket and year
}

// New returns a Service on rdb.
func New(rdb redis.UniversalClient, cfg Config) (*Service, error) {
	if cfg.Buckets == 0 {
		cfg.Buckets = 64
	}
	if cfg.Location == nil {
		cfg.Location = time.UTC
	}
	if cfg.DailyPoints == 0 {
		cfg.DailyPoints = 10
	}
	if cfg.BonusPoints == 0 {
		cfg.BonusPoints = 100
	}
	if cfg.BonusEvery == 0 {
		cfg.BonusEvery = 7
	}
	if cfg.MakeUpWindow == 0 {
		cfg.MakeUpWindow = 7
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case rdb == nil:
		return nil, fmt.Errorf("%w: nil Redis client", ErrConfig)
	case cfg.Buckets < 1 || cfg.Buckets > 16384:
		return nil, fmt.Errorf("%w: %d buckets (1..16384)", ErrConfig, cfg.Buckets)
	case cfg.BonusEvery < 1 || cfg.MakeUpWindow < 1 || cfg.MakeUpWindow > 300:
		return nil, fmt.Errorf("%w: bonus every %d days, make-up window %d days", ErrConfig, cfg.BonusEvery, cfg.MakeUpWindow)
	case cfg.DailyPoints < 0 || cfg.BonusPoints < 0:
		return nil, fmt.Errorf("%w: negative points", ErrConfig)
	case cfg.Layout != Bitmaps && cfg.Layout != Packed:
		return nil, fmt.Errorf("%w: unknown %v", ErrConfig, cfg.Layout)
	case cfg.Layout == Packed && cfg.Users < 1:
		return nil, fmt.Errorf("%w: the Packed layout needs Users, the number of users to size its hashes for", ErrConfig)
	}
	s := &Service{rdb: rdb, cfg: cfg, space: keys.NewSpace(keys.Join(cfg.Namespace, "signin")), hashes: 1}
	if cfg.Layout == Packed {
		s.hashes = max(1, (cfg.Users+cfg.Buckets*usersPerHash-1)/(cfg.Buckets*usersPerHash))
	}
	return s, nil
}

func (s *Service) location(user string) *time.Location {
	if s.cfg.UserLocation != nil {
		if loc := s.cfg.UserLocation(user); loc != nil {
			return loc
		}
	}
	return s.cfg.Location
}

// Today is the user's current day.
func (s *Service) Today(user string) Date { return DateOf(s.cfg.Now(), s.location(user)) }

func (s *Service) cards(user string) string {
	return s.space.Key(s.slotOf(user).bucket, "u", user, "cards")
}

// Outboxes lists the reward streams, one per bucket, for the relay.
func (s *Service) Outboxes() []string {
	out := make([]string, s.cfg.Buckets)
	for b := range out {
		out[b] = s.space.Key("b"+strconv.Itoa(b), "outbox")
	}
	return out
}

func (s *Service) outbox(user string) string { return s.space.Key(s.slotOf(user).bucket, "outbox") }

// expiry keeps a year's bits until the end of the second year after it:
// streaks reach two years back. Older history lives in the monthly backups.
func expiry(year int) int64 {
	return time.Date(year+3, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
}

// checkUser accepts the ids validUser accepts that the layout can hold:
// a Packed field longer than a listpack value would bloat its whole hash.
func (s *Service) checkUser(user string) error {
	if s.cfg.Layout == Packed && len(user) > maxPackedUser {
		return fmt.Errorf("%w: %d bytes (1..%d in the Packed layout)", ErrInvalidUser, len(user), maxPackedUser)
	}
	return validUser(user)
}

func validUser(user string) error {
	if user == "" || len(user) > 128 {
		return fmt.Errorf("%w: %d bytes (1..128)", ErrInvalidUser, len(user))
	}
	for i := range len(user) {
		if c := user[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: byte %#x at %d (printable ASCII only)", ErrInvalidUser, c, i)
		}
	}
	return nil
}

// Result is the outcome of a sign-in or make-up.
type Result struct {
	Date          Date
	AlreadySigned bool
	// Streak is the run of consecutive signed days ending at Date (for a
	// make-up: through the end of the run the made-up day joined). Runs
	// are counted back at most two calendar years before Date's year.
	Streak int
	// Points recorded for granting by this call (DailyPoints, plus
	// BonusPoints on every BonusEvery-th day of a streak).
	Points int64
}

// Sign signs user in for the day `at` falls on in the user's time zone. It
// sets the day's bit, computes the streak and records the reward tasks in one
// script; signing the same day again changes nothing and grants nothing (so
// a sign-in go-redis resends after a lost reply is recorded once, and
// answers AlreadySigned).
func (s *Service) Sign(ctx context.Context, user string, at time.Time) (Result, error) {
	if err := s.checkUser(user); err != nil {
		return Result{}, err
	}
	d := DateOf(at, s.location(user))
	keys := []string{s.year(user, d.Year-2), s.year(user, d.Year-1), s.year(user, d.Year), s.outbox(user), s.layoutKey(user)}
	v, err := signScript.Run(ctx, s.rdb, keys, user, d.offset(), d.String(), daysIn(d.Year-2), daysIn(d.Year-1),
		s.cfg.DailyPoints, s.cfg.BonusPoints, s.cfg.BonusEvery, expiry(d.Year), s.layoutName()).Int64Slice()
	if err != nil {
		return Result{}, fmt.Errorf("signin: sign %s on %s: %w", user, d, scriptErr(err))
	}
	return Result{Date: d, AlreadySigned: v[0] == 1, Streak: int(v[1]), Points: v[2]}, nil
}

// AddCards gives user n make-up cards.
func (s *Service) AddCards(ctx context.Context, user string, n int64) error {
	if err := s.checkUser(user); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("signin: add %d cards", n)
	}
	return s.rdb.IncrBy(ctx, s.cards(user), n).Err()
}

// MakeUp signs user in for a missed day within the make-up window (not
// today, not the future), spending one card. The streak through the run the
// day joins is recomputed, and bonuses that become due are recorded.
func (s *Service) MakeUp(ctx context.Context, user string, day Date) (Result, error) {
	if err := s.checkUser(user); err != nil {
		return Result{}, err
	}
	today := s.Today(user)
	back := daysBetween(day, today)
	if back < 1 || back > s.cfg.MakeUpWindow {
		return Result{}, fmt.Errorf("%w: %s is %d days before %s (1..%d)", ErrOutsideWindow, day, back, today, s.cfg.MakeUpWindow)
	}
	y := day.Year
	keys := []string{s.year(user, y-2), s.year(user, y-1), s.year(user, y), s.year(user, y+1), s.cards(user), s.outbox(user), s.layoutKey(user)}
	args := []any{user, daysIn(y - 2), daysIn(y - 1), s.cfg.DailyPoints, s.cfg.BonusPoints, s.cfg.BonusEvery, expiry(y + 1), s.layoutName()}
	for d := day; !today.Before(d); d = d.AddDays(1) {
		ki := 3
		if d.Year > y {
			ki = 4
		}
		args = append(args, ki, d.offset(), d.String())
	}
	v, err := makeupScript.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return Result{}, fmt.Errorf("signin: make up %s for %s: %w", day, user, scriptErr(err))
	}
	switch v[0] {
	case -1:
		return Result{}, ErrNoCard
	case -2:
		return Result{}, fmt.Errorf("%w: %s", ErrAlreadySigned, day)
	}
	return Result{Date: day, Streak: int(v[1]), Points: v[2]}, nil
}
