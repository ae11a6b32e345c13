package signin

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/keys"
)

var (
	//go:embed bits.lua
	bitsLua string
	//go:embed days.lua
	daysLua string
	//go:embed sign.lua
	signLua string
	//go:embed makeup.lua
	makeupLua string
	//go:embed freeze.lua
	freezeLua string
	//go:embed sweep.lua
	sweepLua string
	//go:embed stats.lua
	statsLua string
	//go:embed restore.lua
	restoreLua string

	signScript    = redis.NewScript(bitsLua + daysLua + signLua)
	makeupScript  = redis.NewScript(bitsLua + daysLua + makeupLua)
	freezeScript  = redis.NewScript(bitsLua + daysLua + freezeLua)
	sweepScript   = redis.NewScript(bitsLua + daysLua + sweepLua)
	statsScript   = redis.NewScript(bitsLua + daysLua + statsLua)
	restoreScript = redis.NewScript(bitsLua + restoreLua)
)

var (
	// ErrNoCard is returned by MakeUp when the user has no make-up card.
	ErrNoCard = errors.New("signin: no make-up card")
	// ErrAlreadySigned is returned by MakeUp for a day already signed,
	// which is also what a make-up whose reply was lost gets when go-redis
	// resends it: the day was made up, and its card spent, once.
	ErrAlreadySigned = errors.New("signin: day already signed")
	// ErrOutsideWindow is returned by Sign for a day in a year whose data
	// has expired, and by MakeUp for today, a future day or a
	// day older than the make-up window.
	ErrOutsideWindow = errors.New("signin: day outside the make-up window")
	// ErrInvalidUser is returned for a user id that is empty, longer than
	// 128 bytes (64 in the Packed layout), or holds a byte outside visible
	// ASCII, 0x21–0x7E: no space, no control byte (what the SQL ledger
	// stores).
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
	// DayStart is the local time of day at which a new day begins [0,
	// midnight], from 0 to 24h exclusive: with 4h, a check-in at 00:30
	// counts for the day before. See DayOf for the rule on DST days. Keep
	// it (and a user's zone) the same in every process sharing the data:
	// it is not recorded, and two processes with different DayStarts each
	// count by their own, so one's sign-in can be the other's late sign-in
	// for the day before.
	DayStart time.Duration
	// MaxFreezes is how many streak freezes a user may hold [2], 1..365.
	// A freeze covers one missed day (see the package documentation);
	// AddFreezes never raises a balance past it.
	MaxFreezes int
	// DailyPoints for each day signed [10]; BonusPoints on every
	// BonusEvery-th consecutive day [100, 7].
	DailyPoints int64
	BonusPoints int64
	BonusEvery  int
	// MakeUpWindow is how many days back a missed day can be made up [7].
	MakeUpWindow int
	// Now is the clock [time.Now].
	Now func() time.Time
	// MeterProvider and TracerProvider receive the block's metrics and
	// spans [nil: OpenTelemetry's global providers; while the service has
	// installed none, instrumentation costs nothing]. See "Observability"
	// in the package documentation for the instruments.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Service is daily check-in on Redis (bitmaps, or packed hashes). It is safe
// for concurrent use.
type Service struct {
	rdb    redis.UniversalClient
	cfg    Config
	space  keys.Space
	hashes int // Packed: hashes per bucket and year
	obs    *instruments
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
	if cfg.MaxFreezes == 0 {
		cfg.MaxFreezes = 2
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
	case cfg.DayStart < 0 || cfg.DayStart >= 24*time.Hour:
		return nil, fmt.Errorf("%w: day start %v (0 to 24h exclusive)", ErrConfig, cfg.DayStart)
	case cfg.MaxFreezes < 1 || cfg.MaxFreezes > 365:
		return nil, fmt.Errorf("%w: %d freezes at most (1..365)", ErrConfig, cfg.MaxFreezes)
	case cfg.Layout == Packed && cfg.Users < 1:
		return nil, fmt.Errorf("%w: the Packed layout needs Users, the number of users to size its hashes for", ErrConfig)
	}
	s := &Service{rdb: rdb, cfg: cfg, space: keys.NewSpace(keys.Join(cfg.Namespace, "signin")), hashes: 1}
	if cfg.Layout == Packed {
		s.hashes = max(1, (cfg.Users+cfg.Buckets*usersPerHash-1)/(cfg.Buckets*usersPerHash))
	}
	s.obs = newInstruments(s, cfg.MeterProvider, cfg.TracerProvider)
	return s, nil
}

// Close stops the reward backlog gauge from being collected (it reads every
// outbox stream's length at each collection). Safe to call twice; the
// Service still works after it, without the gauge.
func (s *Service) Close() error { return s.obs.close() }

func (s *Service) location(user string) *time.Location {
	if s.cfg.UserLocation != nil {
		if loc := s.cfg.UserLocation(user); loc != nil {
			return loc
		}
	}
	return s.cfg.Location
}

// Today is the user's current day: DayOf the clock's time.
func (s *Service) Today(user string) Date { return s.DayOf(user, s.cfg.Now()) }

// DayOf returns the day an instant counts for in user's time zone: the date
// of its local wall-clock time less Config.DayStart (with a DayStart of 4h,
// 03:59 on 2 March counts for 1 March, 04:00 for 2 March). Where the clock
// skips DayStart (summer time begins), the day begins at the first instant
// after the gap. Where the clock is set back across DayStart (summer time
// ends), the day that began the first time the clock read DayStart goes on
// through the repeated hour: a day never goes back to the one before. Every
// call that maps an instant to a day (Sign, Today, MakeUp's window, Streak,
// Stats and the freezes) uses this rule.
func (s *Service) DayOf(user string, at time.Time) Date {
	return dayOf(at, s.location(user), s.cfg.DayStart)
}

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
			return fmt.Errorf("%w: byte %#x at %d (visible ASCII 0x21-0x7e only: no space)", ErrInvalidUser, c, i)
		}
	}
	return nil
}

// Result is the outcome of a sign-in or make-up.
type Result struct {
	Date          Date `json:"date"`
	AlreadySigned bool `json:"already_signed,omitempty"`
	// Streak is the number of signed days in the run ending at Date (for a
	// make-up or a late sign-in: through the end of the run the day
	// joined). A run is consecutive days each signed or frozen; frozen days
	// keep it going and do not count.
	Streak int `json:"streak"`
	// Points recorded for granting by this call (DailyPoints, plus
	// BonusPoints on every BonusEvery-th day of a streak).
	Points int64 `json:"points"`
	// Frozen are the missed days this call covered with freezes, oldest
	// first (a retry whose first run froze them reports none).
	Frozen []Date `json:"frozen,omitempty"`
}

// Sign signs user in for the day `at` counts for (DayOf). In one script it
// settles the days before that day (covering missed ones with freezes, see
// the package documentation), sets the day's bit, updates the streak state
// and records the reward tasks; signing the same day again changes nothing
// and grants nothing (so a sign-in go-redis resends after a lost reply is
// recorded once, answers AlreadySigned, and spends no freeze twice). A day
// before the user's latest signed or frozen day (a late sign-in: a clock
// behind the others, a queued request) is filled as MakeUp fills it, without
// a card. A day in a year whose data has expired — before 1 January of the
// year two before the user's today — is ErrOutsideWindow, and nothing
// changes: its bit would expire as it is set, and the sign-in would count
// again on every call.
func (s *Service) Sign(ctx context.Context, user string, at time.Time) (Result, error) {
	ctx, call := s.obs.sign.Start(ctx)
	res, err := s.sign(ctx, user, at)
	if err == nil && res.AlreadySigned {
		call.End(ErrAlreadySigned) // counted as a refusal; the caller gets the idempotent answer
		return res, nil
	}
	return res, call.End(err)
}

func (s *Service) sign(ctx context.Context, user string, at time.Time) (Result, error) {
	if err := s.checkUser(user); err != nil {
		return Result{}, err
	}
	d := s.DayOf(user, at)
	if today := s.Today(user); d.Year < today.Year-2 {
		return Result{}, fmt.Errorf("%w: %s is in a year whose days have expired (kept: %d..%d)", ErrOutsideWindow, d, today.Year-2, today.Year)
	}
	keys, args := s.dayCall(user, d.Year-2, s.stateKey(user), d)
	v, err := signScript.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return Result{}, fmt.Errorf("signin: sign %s on %s: %w", user, d, scriptErr(err))
	}
	return Result{Date: d, AlreadySigned: v[0] == 1, Streak: int(v[1]), Points: v[2], Frozen: dates(v[3:])}, nil
}

// AddCards gives user n make-up cards.
func (s *Service) AddCards(ctx context.Context, user string, n int64) error {
	ctx, call := s.obs.addCards.Start(ctx)
	if err := s.checkUser(user); err != nil {
		return call.End(err)
	}
	if n < 1 {
		return call.End(invalid(fmt.Errorf("signin: add %d cards", n)))
	}
	return call.End(s.rdb.IncrBy(ctx, s.cards(user), n).Err())
}

// MakeUp signs user in for a missed (or frozen) day within the make-up
// window (not today, not the future), spending one card; a frozen day gives
// its freeze back (up to MaxFreezes). The streak through the run the day
// joins is recomputed, and bonuses that become due are recorded. Like every
// call that writes, it first settles the days before today (freezes).
func (s *Service) MakeUp(ctx context.Context, user string, day Date) (Result, error) {
	ctx, call := s.obs.makeUp.Start(ctx)
	res, err := s.makeUp(ctx, user, day)
	return res, call.End(err)
}

func (s *Service) makeUp(ctx context.Context, user string, day Date) (Result, error) {
	if err := s.checkUser(user); err != nil {
		return Result{}, err
	}
	today := s.Today(user)
	back := daysBetween(day, today)
	if back < 1 || back > s.cfg.MakeUpWindow {
		return Result{}, fmt.Errorf("%w: %s is %d days before %s (1..%d)", ErrOutsideWindow, day, back, today, s.cfg.MakeUpWindow)
	}
	keys, args := s.dayCall(user, day.Year-2, s.cards(user), today)
	v, err := makeupScript.Run(ctx, s.rdb, keys, append(args, dayNumber(day))...).Int64Slice()
	if err != nil {
		return Result{}, fmt.Errorf("signin: make up %s for %s: %w", day, user, scriptErr(err))
	}
	switch v[0] {
	case -1:
		return Result{}, ErrNoCard
	case -2:
		return Result{}, fmt.Errorf("%w: %s", ErrAlreadySigned, day)
	}
	return Result{Date: day, Streak: int(v[1]), Points: v[2], Frozen: dates(v[3:])}, nil
}
