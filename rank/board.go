package rank

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/casebook-dev/casebook/internal/keys"
)

var (
	//go:embed write.lua
	writeLua    string
	writeScript = redis.NewScript(writeLua)
)

var (
	// ErrScoreRange is returned for a score (or a sum) outside 0..MaxScore.
	ErrScoreRange = errors.New("rank: score out of range")
	// ErrTimeRange is returned for a write outside the board's lifetime.
	ErrTimeRange = errors.New("rank: time outside the board's lifetime")
	// ErrNotFound is returned for a member not on the board.
	ErrNotFound = errors.New("rank: member not on the board")
	// ErrBadCursor is returned for a cursor Page did not make.
	ErrBadCursor = errors.New("rank: bad cursor")
	// ErrConfig is wrapped by configuration errors.
	ErrConfig = errors.New("rank: bad config")
	// ErrEncodingMismatch is returned when a board's stored values were
	// written with another Epoch, Lifetime or Resolution than this Board's:
	// they would decode to wrong scores and times, so nothing is read or
	// written.
	ErrEncodingMismatch = errors.New("rank: board encoding mismatch")
)

// Config configures a Board. Ties are broken exactly by time, which costs
// bits of the 53 a float64 sorted-set score holds: TimeBits =
// ceil(log2(Lifetime / Resolution)), and scores are limited to
// 0..2^(53-TimeBits)-1 (MaxScore reports it).
type Config struct {
	// Name of the board; shard i's keys are "<Namespace>:{<Name>:<i>}:rank"
	// (the sorted set), ":meta" (metadata), ":encoding" (Epoch, Lifetime and
	// Resolution as first written) and ":req:<id>" (recent write replies).
	Name string
	// Namespace prefixes every key.
	Namespace string
	// Shards is the number of sorted sets the board is split over, by
	// member hash, each on its own cluster slot. 1 for boards of a few
	// million members; more when one set would be too big or too hot.
	// Reads that span shards (Rank, Around, Top, Page) send every shard a
	// command or two, so their cost grows with Shards. Default 1.
	Shards int
	// Epoch is when the board starts; writes before it are rejected.
	// Required. Epoch, Lifetime and Resolution decide how stored values
	// decode, so every process sharing a board must use the same three: the
	// first write stores them beside each shard and a Board configured
	// otherwise gets ErrEncodingMismatch.
	Epoch time.Time
	// Lifetime is how long the board accepts writes. Default 30 days,
	// which at 1 ms resolution leaves scores up to 2,097,151; a daily board
	// at 1 ms holds scores up to 2^26-1.
	Lifetime time.Duration
	// Resolution of the tie-breaking time. Default 1 ms. Members reaching
	// one score within one Resolution are ordered by member name, as Redis
	// orders equal values (greater name first).
	Resolution time.Duration
	// ExpireAfter, when positive, makes every key expire that long after
	// Epoch + Lifetime (periodic boards use it for retention).
	ExpireAfter time.Duration
	// Staleness is how old TopCached may serve a result. Default 1 s.
	Staleness time.Duration
	// Now is the clock, for tests. Default time.Now.
	Now func() time.Time
}

// Board is a leaderboard: members with integer scores, ranked by score and,
// at equal scores, by who reached the score first. It is safe for concurrent
// use.
type Board struct {
	c        redis.UniversalClient
	cfg      Config
	shards   []string // sorted-set keys
	keyArgs  []any    // the same, boxed once for the commands of sharded reads
	meta     []string // metadata hash keys, one per shard
	encoded  []string // encoding record keys, one per shard
	encoding string   // this Board's Epoch, Lifetime and Resolution
	checked  atomic.Bool
	space    keys.Space
	tags     []string
	timeBits uint
	span     uint64 // 2^timeBits
	maxScore int64
	expireMs int64

	flight singleflight.Group
	cached atomic.Pointer[cachedTop]
}

// New returns a board on c (a single node, Sentinel or Cluster client).
func New(c redis.UniversalClient, cfg Config) (*Board, error) {
	if cfg.Shards == 0 {
		cfg.Shards = 1
	}
	if cfg.Lifetime == 0 {
		cfg.Lifetime = 30 * 24 * time.Hour
	}
	if cfg.Resolution == 0 {
		cfg.Resolution = time.Millisecond
	}
	if cfg.Staleness == 0 {
		cfg.Staleness = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w: nil client", ErrConfig)
	case cfg.Name == "":
		return nil, fmt.Errorf("%w: empty name", ErrConfig)
	case cfg.Epoch.IsZero():
		return nil, fmt.Errorf("%w: zero epoch", ErrConfig)
	case cfg.Shards < 1 || cfg.Shards > 1024:
		return nil, fmt.Errorf("%w: %d shards (1..1024)", ErrConfig, cfg.Shards)
	case cfg.Resolution <= 0 || cfg.Lifetime < cfg.Resolution:
		return nil, fmt.Errorf("%w: lifetime %v, resolution %v", ErrConfig, cfg.Lifetime, cfg.Resolution)
	}
	ticks := uint64(cfg.Lifetime / cfg.Resolution)
	b := &Board{c: c, cfg: cfg, timeBits: uint(bits.Len64(ticks - 1))}
	if b.timeBits > 45 {
		return nil, fmt.Errorf("%w: lifetime/resolution needs %d bits, leaving fewer than 8 for scores", ErrConfig, b.timeBits)
	}
	b.span = 1 << b.timeBits
	b.maxScore = 1<<(53-b.timeBits) - 1
	if cfg.ExpireAfter > 0 {
		b.expireMs = cfg.Epoch.Add(cfg.Lifetime + cfg.ExpireAfter).UnixMilli()
	}
	b.encoding = fmt.Sprintf("epoch=%s lifetime=%v resolution=%v", cfg.Epoch.UTC().Format(time.RFC3339Nano), cfg.Lifetime, cfg.Resolution)
	b.space = keys.NewSpace(cfg.Namespace)
	for i := range cfg.Shards {
		tag := cfg.Name + ":" + strconv.Itoa(i)
		b.tags = append(b.tags, tag)
		b.shards = append(b.shards, b.space.Key(tag, "rank"))
		b.keyArgs = append(b.keyArgs, b.shards[i])
		b.meta = append(b.meta, b.space.Key(tag, "meta"))
		b.encoded = append(b.encoded, b.space.Key(tag, "encoding"))
	}
	return b, nil
}

// checkEncoding makes sure, once per Board, that no shard was written with
// another encoding. Reads call it; writes check in their script.
func (b *Board) checkEncoding(ctx context.Context) error {
	if b.checked.Load() {
		return nil
	}
	pipe := b.c.Pipeline()
	cmds := make([]*redis.StringCmd, len(b.encoded))
	for i, k := range b.encoded {
		cmds[i] = pipe.Get(ctx, k)
	}
	pipe.Exec(ctx)
	for _, cmd := range cmds {
		stored, err := cmd.Result()
		if isNil(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("rank: read encoding of %s: %w", b.cfg.Name, err)
		}
		if stored != b.encoding {
			return fmt.Errorf("%w: board %s was written with %s, this Board uses %s", ErrEncodingMismatch, b.cfg.Name, stored, b.encoding)
		}
	}
	b.checked.Store(true)
	return nil
}

// Period returns the interval in which the board accepts writes:
// [Epoch, Epoch+Lifetime).
func (b *Board) Period() (start, end time.Time) {
	return b.cfg.Epoch, b.cfg.Epoch.Add(b.cfg.Lifetime)
}

// MaxScore is the largest score the board accepts.
func (b *Board) MaxScore() int64 { return b.maxScore }

// Keys returns the sorted-set keys, one per shard.
func (b *Board) Keys() []string { return append([]string(nil), b.shards...) }

func (b *Board) shardOf(member string) int {
	return int(xxhash.Sum64String(member) % uint64(len(b.shards)))
}

// rest is the low part of a stored value written at t.
func (b *Board) rest(t time.Time) (uint64, error) {
	d := t.Sub(b.cfg.Epoch)
	if d < 0 || d >= b.cfg.Lifetime {
		return 0, fmt.Errorf("%w: %v is %v after the epoch %v (lifetime %v)", ErrTimeRange, t, d, b.cfg.Epoch, b.cfg.Lifetime)
	}
	tick := uint64(d / b.cfg.Resolution)
	return b.span - 1 - tick, nil
}

// Entry is a member's place on a board.
type Entry struct {
	Member string
	Score  int64
	Rank   int64     // 1-based
	At     time.Time // when the member reached Score, to the Resolution
	value  uint64    // the stored value
}

func (b *Board) entry(member string, value uint64) Entry {
	tick := b.span - 1 - value%b.span
	return Entry{
		Member: member,
		Score:  int64(value / b.span),
		At:     b.cfg.Epoch.Add(time.Duration(tick) * b.cfg.Resolution),
		value:  value,
	}
}

// before reports whether a ranks above b: greater stored value, then, as in
// Redis' reverse order, greater member name.
func before(a, b Entry) bool {
	return a.value > b.value || a.value == b.value && a.Member > b.Member
}
