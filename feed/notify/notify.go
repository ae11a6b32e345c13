package notify

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/keys"
)

var (
	// ErrConfig is wrapped by every configuration error.
	ErrConfig = errors.New("notify: bad config")
	// ErrInvalid is wrapped by errors about bad input; nothing was written.
	ErrInvalid = errors.New("notify: invalid input")
	// ErrCursor is returned for a cursor that is not one Groups makes
	// (malformed, another version, a place outside 1..2^53). A well-formed
	// cursor carries nothing secret and is not authenticated: a forged one
	// is only another place in the user's own groups to start from.
	ErrCursor = errors.New("notify: malformed cursor")
	// ErrBadMessage is a wire-form activity that can never be applied; it
	// is marked outbox.ErrPoison.
	ErrBadMessage = errors.New("notify: bad activity message")
)

// Limits on input.
const (
	// MaxPage is the largest n Groups accepts.
	MaxPage = 500
	// MaxMark is the most group ids one MarkSeen or MarkRead accepts.
	MaxMark = 1000
	// MaxCap is the largest Config.Cap.
	MaxCap = 100_000
	// MaxSkew is how far in the future (by Config.Now) an activity's time
	// may be: producers' clocks differ a little, never by hours.
	MaxSkew = 10 * time.Minute
	maxVerb = 32
)

// Config configures a Feed. Zero values take the defaults in brackets.
type Config struct {
	// Namespace prefixes every Redis key.
	Namespace string
	// Now is the clock [time.Now]; it places activities in windows only
	// through their own Time, and bounds how old or new a Time may be.
	Now func() time.Time
	// Window is the aggregation window [24h]: activities with the same
	// verb and object whose times fall in the same window (counted from
	// the Unix epoch, in UTC) form one group. Between 1s and 366 days, and
	// a whole number of milliseconds.
	Window time.Duration
	// Cap is how many groups each user keeps [100]; a new group beyond it
	// drops the least recently updated one. Memory per user is about Cap ×
	// (a group's JSON + its set of distinct actors). At most MaxCap.
	// Lowering it trims a user's feed to the new Cap at their next new
	// group.
	Cap int
	// MaxActors is how many actors a group lists [5]: the first distinct
	// actors to arrive, in arrival order (ActorCount counts them all).
	// At most 100.
	MaxActors int
	// DedupeTTL is how long an activity id is remembered [2 × Window]; at
	// least Window. Add refuses activities older than DedupeTTL (by Now),
	// so an id is never applied again after it is forgotten.
	DedupeTTL time.Duration
	// MeterProvider and TracerProvider receive the Feed's metrics and
	// spans [the global providers].
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

func (c *Config) defaults() {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Window == 0 {
		c.Window = 24 * time.Hour
	}
	if c.Cap == 0 {
		c.Cap = 100
	}
	if c.MaxActors == 0 {
		c.MaxActors = 5
	}
	if c.DedupeTTL == 0 {
		c.DedupeTTL = 2 * c.Window
	}
}

func (c *Config) validate() error {
	switch {
	case c.Window < time.Second || c.Window > 366*24*time.Hour || c.Window%time.Millisecond != 0:
		return fmt.Errorf("%w: Window %v (1s..366 days, whole milliseconds)", ErrConfig, c.Window)
	case c.Cap < 1 || c.Cap > MaxCap:
		return fmt.Errorf("%w: Cap %d (1..%d)", ErrConfig, c.Cap, MaxCap)
	case c.MaxActors < 1 || c.MaxActors > 100:
		return fmt.Errorf("%w: MaxActors %d (1..100)", ErrConfig, c.MaxActors)
	case c.DedupeTTL < c.Window || c.DedupeTTL%time.Millisecond != 0:
		return fmt.Errorf("%w: DedupeTTL %v (at least Window %v, whole milliseconds)", ErrConfig, c.DedupeTTL, c.Window)
	}
	return nil
}

// Feed is the notification feeds of every user. Safe for concurrent use,
// from any number of processes.
type Feed struct {
	rdb   redis.UniversalClient
	cfg   Config
	space keys.Space
	obs   *instruments
}

// New returns a Feed on rdb.
func New(rdb redis.UniversalClient, cfg Config) (*Feed, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrConfig)
	}
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Feed{rdb: rdb, cfg: cfg, space: keys.NewSpace(cfg.Namespace), obs: newInstruments(cfg.MeterProvider, cfg.TracerProvider)}, nil
}

// Close releases nothing (a Feed owns no goroutine or connection); it is
// there so that every block is an io.Closer. Safe to call twice.
func (f *Feed) Close() error { return nil }

// Activity is one thing that happened: Actor did Verb to Object, to be
// told to Target.
type Activity struct {
	// ID is unique per activity: the exactly-once key (a redelivered or
	// re-sent activity carries the same ID).
	ID string `json:"id"`
	// Actor, Object and Target are ids: 1..64 bytes of printable ASCII.
	Actor string `json:"actor"`
	// Verb is 1..32 bytes of [a-z0-9_], starting with a letter.
	Verb   string `json:"verb"`
	Object string `json:"object"`
	Target string `json:"target"`
	// Time is when it happened; it picks the window.
	Time time.Time `json:"time"`
}

// Group is one aggregated notification: ActorCount distinct actors did
// Verb to Object within one window ("alice and 3 others liked post 42").
type Group struct {
	ID         string    `json:"id"`
	Verb       string    `json:"verb"`
	Object     string    `json:"object"`
	ActorCount int64     `json:"actor_count"`
	Actors     []string  `json:"actors"`
	First      time.Time `json:"first"`
	Last       time.Time `json:"last"`
	Seen       bool      `json:"seen"`
	Read       bool      `json:"read"`
}

// Page is one page of groups; Next is the cursor of the next page, "" at
// the end.
type Page struct {
	Groups []Group `json:"groups"`
	Next   string  `json:"next"`
}

// Counts are a user's unseen and unread groups.
type Counts struct {
	Unseen int64 `json:"unseen"`
	Unread int64 `json:"unread"`
}

var (
	//go:embed add.lua
	addSource string
	addScript = redis.NewScript(addSource)
)

// Add applies a to its target's feed, once: an ID applied before (within
// DedupeTTL) changes nothing. It refuses, with ErrInvalid and changing
// nothing, a bad field, a Time more than MaxSkew ahead of Now or older
// than DedupeTTL.
func (f *Feed) Add(ctx context.Context, a Activity) (err error) {
	ctx, call := f.obs.add.Start(ctx)
	defer func() { err = call.End(err) }()
	_, err = f.add(ctx, a)
	return err
}

// add returns whether a was applied (false: a duplicate).
func (f *Feed) add(ctx context.Context, a Activity) (bool, error) {
	if err := f.validActivity(a); err != nil {
		return false, err
	}
	gid := groupID(a.Verb, a.Object, f.bucket(a.Time))
	// The id is remembered until a is too old to be added, by any clock
	// up to MaxSkew behind this one.
	ttl := f.cfg.DedupeTTL - f.cfg.Now().Sub(a.Time) + MaxSkew
	ks := f.keys(a.Target)
	actors := f.actorsKey(a.Target, gid)
	drop, dropKey := "", ks.groups
	for {
		res, err := addScript.Run(ctx, f.rdb, []string{f.space.Key(userTag(a.Target), "id", a.ID), ks.groups, ks.data,
			ks.unseen, ks.unread, ks.seq, actors, dropKey},
			ttl.Milliseconds()+1, gid, a.Actor, a.Time.UnixMilli(), f.cfg.Cap, f.cfg.MaxActors, drop).Slice()
		if err != nil {
			return false, fmt.Errorf("notify: add activity %q: %w", a.ID, err)
		}
		switch code, _ := res[0].(int64); code {
		case 0:
			return false, nil
		case 1:
			return true, nil
		}
		drop, _ = res[1].(string)
		dropKey = f.actorsKey(a.Target, drop)
	}
}

func (f *Feed) validActivity(a Activity) error {
	if err := validFields(a); err != nil {
		return err
	}
	now := f.cfg.Now()
	if a.Time.After(now.Add(MaxSkew)) || a.Time.Before(now.Add(-f.cfg.DedupeTTL)) {
		return fmt.Errorf("%w: activity time %v is not within [now-%v, now+%v]", ErrInvalid, a.Time.UTC(), f.cfg.DedupeTTL, MaxSkew)
	}
	return nil
}

// validFields checks a's fields but its time.
func validFields(a Activity) error {
	for _, id := range [...]struct{ name, v string }{{"id", a.ID}, {"actor", a.Actor}, {"object", a.Object}, {"target", a.Target}} {
		if err := gene.ValidID(id.v); err != nil {
			return fmt.Errorf("%w: activity %s: %w", ErrInvalid, id.name, err)
		}
	}
	return validVerb(a.Verb)
}

func validVerb(v string) error {
	ok := len(v) >= 1 && len(v) <= maxVerb && v[0] >= 'a' && v[0] <= 'z'
	for i := 0; ok && i < len(v); i++ {
		c := v[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'
	}
	if !ok {
		return fmt.Errorf("%w: verb %.40q (1..%d bytes of [a-z0-9_], a letter first)", ErrInvalid, v, maxVerb)
	}
	return nil
}

// bucket is the window t falls in, counted from the Unix epoch.
func (f *Feed) bucket(t time.Time) int64 {
	ms, w := t.UnixMilli(), f.cfg.Window.Milliseconds()
	b := ms / w
	if ms < 0 && ms%w != 0 {
		b--
	}
	return b
}

// groupID is "<window>:<verb>:<object>"; the object, which may hold
// colons, comes last.
func groupID(verb, object string, bucket int64) string {
	return strconv.FormatInt(bucket, 10) + ":" + verb + ":" + object
}

// parseGroupID splits a group id; ok is false for anything groupID would
// not make.
func parseGroupID(id string) (verb, object string, bucket int64, ok bool) {
	b, rest, ok1 := strings.Cut(id, ":")
	verb, object, ok2 := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(b, 10, 64)
	if !ok1 || !ok2 || err != nil || strconv.FormatInt(n, 10) != b || validVerb(verb) != nil || gene.ValidID(object) != nil {
		return "", "", 0, false
	}
	return verb, object, n, true
}

// userKeys are one user's keys, all under the hash tag "n:<user>".
type userKeys struct{ groups, data, unseen, unread, seq string }

func userTag(user string) string { return "n:" + user }

func (f *Feed) keys(user string) userKeys {
	tag := userTag(user)
	return userKeys{groups: f.space.Key(tag, "groups"), data: f.space.Key(tag, "data"),
		unseen: f.space.Key(tag, "unseen"), unread: f.space.Key(tag, "unread"), seq: f.space.Key(tag, "seq")}
}

func (f *Feed) actorsKey(user, gid string) string { return f.space.Key(userTag(user), "actors", gid) }

func validUser(user string) error {
	if err := gene.ValidID(user); err != nil {
		return fmt.Errorf("%w: user %w", ErrInvalid, err)
	}
	return nil
}
