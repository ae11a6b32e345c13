package rank

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/casebook-dev/casebook/internal/keys"
)

var (
	//go:embed write.lua
	writeLua    string
	writeScript = redis.NewScript(writeLua)
)

var (
	// ErrScoreRange is returned for a score (or a sum) outside
	// MinScore..MaxScore.
	ErrScoreRange = errors.New("rank: score out of range")
	// ErrTimeRange is returned for a write outside the board's period
	// (Epoch, Lifetime), when it has one, and for a Freeze of a board
	// whose keys have expired.
	ErrTimeRange = errors.New("rank: time outside the board's period")
	// ErrNotFound is returned for a member not on the board.
	ErrNotFound = errors.New("rank: member not on the board")
	// ErrBadCursor is returned for a cursor Page did not make, and wrapped
	// (with ErrInvalid) for one Range did not make for its range.
	ErrBadCursor = errors.New("rank: bad cursor")
	// ErrConfig is wrapped by configuration errors.
	ErrConfig = errors.New("rank: bad config")
	// ErrEncodingMismatch is returned when a board's stored values were
	// written in another encoding than this Board's (another Order, or a
	// packed board's other Epoch, Lifetime or Resolution): they would decode
	// to wrong scores and times, so nothing is read or written.
	ErrEncodingMismatch = errors.New("rank: board encoding mismatch")
	// ErrInvalid is wrapped by the errors of bad arguments (a member name,
	// a request id, a size or a range out of bounds); nothing changed.
	ErrInvalid = errors.New("rank: invalid argument")
	// ErrMigrating is returned when a Migrate stopped while switching the
	// board's shards to the new encoding, leaving some in each: nothing can
	// be read or written until Migrate is run again, which finishes the
	// switch first. Operations that meet a switch in progress wait for it
	// (up to about a second) instead.
	ErrMigrating = errors.New("rank: board is switching encodings")
)

// Order says which scores rank first.
type Order int

const (
	Descending Order = iota // highest score first (the default)
	Ascending               // lowest score first: time trials, golf
)

// Ties says how members at one score are numbered. In every mode they are
// listed by who reached the score first.
type Ties int

const (
	Ordinal     Ties = iota // 1, 2, 3, 4: at one score, who got there first ranks higher (the default)
	Competition             // 1, 2, 2, 4: one score, one rank; the next rank skips
	Dense                   // 1, 2, 2, 3: one score, one rank; the next rank follows
)

// Encoding is how a board stores scores and tie-breaks in Redis.
type Encoding int

const (
	// EncodingAuto reads a board in whatever encoding it was written with
	// and writes a new board in EncodingMember.
	EncodingAuto Encoding = iota
	// EncodingMember stores the score alone as the sorted-set score and the
	// time it was reached in a fixed-width prefix of the sorted-set member:
	// any score in ±(2^53−1), no lifetime. Each shard also has a hash of
	// member → prefix.
	EncodingMember
	// EncodingPacked is the encoding of boards written before
	// EncodingMember: score and time packed into one float64, so scores are
	// limited to 0..2^(53−TimeBits)−1 and writes to [Epoch, Epoch+Lifetime).
	// It ranks Descending and Ordinal only. Kept so that those boards still
	// read and write; new boards should not use it.
	EncodingPacked
)

// maxScore is the largest magnitude an int64 score has as a float64 exactly.
const maxScore = 1<<53 - 1

// Config configures a Board.
type Config struct {
	// Name of the board; shard i's keys are "<Namespace>:{<Name>:<i>}:rank"
	// (the sorted set), ":ties" (member → tie-break prefix), ":meta"
	// (metadata), ":encoding" (the encoding as first written) and
	// ":req:<id>" (recent write replies).
	Name string
	// Namespace prefixes every key.
	Namespace string
	// Shards is the number of sorted sets the board is split over, by
	// member hash, each on its own cluster slot. 1 for boards of a few
	// million members; more when one set would be too big or too hot.
	// Reads that span shards (Rank, Around, Top, Page) send every shard a
	// command, so their cost grows with Shards. Default 1.
	Shards int
	// Order is Descending (default: highest score first) or Ascending.
	// It decides how scores are stored, so it is recorded with the board:
	// a Board of the other Order gets ErrEncodingMismatch.
	Order Order
	// Ties is how members at one score are numbered: Ordinal (default),
	// Competition or Dense. It only changes how ranks are counted, never
	// what is stored, so processes may differ. Dense ranks over several
	// shards cost in proportion to the distinct better scores (see Rank).
	Ties Ties
	// Encoding is EncodingAuto (default) for every new board.
	Encoding Encoding
	// Epoch, when set, is when the board starts: earlier writes are
	// refused. Required for an EncodingPacked board, whose stored values
	// it decodes.
	Epoch time.Time
	// Lifetime, when positive, is how long after Epoch the board accepts
	// writes (periodic boards set it). Zero: for as long as the board
	// exists. An EncodingPacked board's default is 30 days, which at 1 ms
	// resolution leaves scores up to 2,097,151.
	Lifetime time.Duration
	// Resolution of the tie-breaking time. Default 1 ms. Members reaching
	// one score within one Resolution are ordered by member name, greater
	// first, as Redis orders equal values.
	Resolution time.Duration
	// ExpireAfter, when positive, makes every key expire that long after
	// Epoch + Lifetime (periodic boards use it for retention); a board with
	// no Lifetime never expires.
	ExpireAfter time.Duration
	// Staleness is how old TopCached may serve a result. Default 1 s.
	Staleness time.Duration
	// Now is the clock, for tests. Default time.Now.
	Now func() time.Time
	// MeterProvider and TracerProvider receive the board's metrics and
	// spans (doc.go, Observability). Default the global ones.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Board is a leaderboard: members with integer scores, ranked by score and,
// at equal scores, by who reached the score first. It is safe for concurrent
// use.
type Board struct {
	c       redis.UniversalClient
	cfg     Config
	shards  []string // sorted-set keys
	ties    []string // member → prefix hashes, one per shard
	meta    []string // metadata hash keys, one per shard
	encoded []string // encoding record keys, one per shard
	mig     []migrationKeys
	space   keys.Space
	tags    []string
	sign    int64 // 1 for Descending, -1 for Ascending: stored value = sign × score
	// layout is the encoding in use, EncodingMember or EncodingPacked, once
	// the shards' records have been read (0 before).
	layout   atomic.Int32
	memberID string // the recorded encoding of an EncodingMember board
	expireMs int64
	packed   packing

	flight singleflight.Group
	cached atomic.Pointer[cachedTop]
	obs    *instruments
}

// packing is how an EncodingPacked board splits a float64 between score and
// time.
type packing struct {
	id       string // the recorded encoding: Epoch, Lifetime and Resolution
	lifetime time.Duration
	timeBits uint
	span     uint64 // 2^timeBits
	maxScore int64
	expireMs int64
}

// New returns a board on c (a single node, Sentinel or Cluster client).
func New(c redis.UniversalClient, cfg Config) (*Board, error) {
	if cfg.Shards == 0 {
		cfg.Shards = 1
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
	case cfg.Shards < 1 || cfg.Shards > 1024:
		return nil, fmt.Errorf("%w: %d shards (1..1024)", ErrConfig, cfg.Shards)
	case cfg.Order != Descending && cfg.Order != Ascending:
		return nil, fmt.Errorf("%w: unknown order %d", ErrConfig, cfg.Order)
	case cfg.Ties < Ordinal || cfg.Ties > Dense:
		return nil, fmt.Errorf("%w: unknown ties mode %d", ErrConfig, cfg.Ties)
	case cfg.Encoding < EncodingAuto || cfg.Encoding > EncodingPacked:
		return nil, fmt.Errorf("%w: unknown encoding %d", ErrConfig, cfg.Encoding)
	case cfg.Resolution <= 0 || cfg.Lifetime < 0:
		return nil, fmt.Errorf("%w: lifetime %v, resolution %v", ErrConfig, cfg.Lifetime, cfg.Resolution)
	case cfg.Lifetime > 0 && cfg.Epoch.IsZero():
		return nil, fmt.Errorf("%w: a lifetime needs an epoch", ErrConfig)
	case cfg.Encoding == EncodingPacked && cfg.Epoch.IsZero():
		return nil, fmt.Errorf("%w: a packed board needs an epoch", ErrConfig)
	case cfg.Encoding == EncodingPacked && (cfg.Order != Descending || cfg.Ties != Ordinal):
		return nil, fmt.Errorf("%w: a packed board ranks descending and ordinal only", ErrConfig)
	}
	b := &Board{c: c, cfg: cfg, sign: 1, obs: newInstruments(cfg.MeterProvider, cfg.TracerProvider)}
	if cfg.Order == Ascending {
		b.sign = -1
	}
	b.memberID = "member order=" + [...]string{"desc", "asc"}[cfg.Order]
	if !cfg.Epoch.IsZero() {
		p, err := newPacking(cfg)
		if err != nil && cfg.Encoding == EncodingPacked {
			return nil, err
		}
		b.packed = p
	}
	if cfg.ExpireAfter > 0 && cfg.Lifetime > 0 {
		b.expireMs = cfg.Epoch.Add(cfg.Lifetime + cfg.ExpireAfter).UnixMilli()
	}
	b.space = keys.NewSpace(cfg.Namespace)
	for i := range cfg.Shards {
		tag := cfg.Name + ":" + strconv.Itoa(i)
		b.tags = append(b.tags, tag)
		b.shards = append(b.shards, b.space.Key(tag, "rank"))
		b.ties = append(b.ties, b.space.Key(tag, "ties"))
		b.meta = append(b.meta, b.space.Key(tag, "meta"))
		b.encoded = append(b.encoded, b.space.Key(tag, "encoding"))
		b.mig = append(b.mig, migrationKeys{
			state: b.space.Key(tag, "migrate"),
			rank:  b.space.Key(tag, "migrate", "rank"),
			ties:  b.space.Key(tag, "migrate", "ties"),
		})
	}
	return b, nil
}

func newPacking(cfg Config) (packing, error) {
	p := packing{lifetime: cfg.Lifetime}
	if p.lifetime == 0 {
		p.lifetime = 30 * 24 * time.Hour
	}
	if p.lifetime < cfg.Resolution {
		return p, fmt.Errorf("%w: lifetime %v, resolution %v", ErrConfig, p.lifetime, cfg.Resolution)
	}
	ticks := uint64(p.lifetime / cfg.Resolution)
	p.timeBits = uint(bits.Len64(ticks - 1))
	if p.timeBits > 45 {
		return p, fmt.Errorf("%w: lifetime/resolution needs %d bits, leaving fewer than 8 for scores", ErrConfig, p.timeBits)
	}
	p.span = 1 << p.timeBits
	p.maxScore = 1<<(53-p.timeBits) - 1
	if cfg.ExpireAfter > 0 {
		p.expireMs = cfg.Epoch.Add(p.lifetime + cfg.ExpireAfter).UnixMilli()
	}
	p.id = fmt.Sprintf("epoch=%s lifetime=%v resolution=%v", cfg.Epoch.UTC().Format(time.RFC3339Nano), p.lifetime, cfg.Resolution)
	return p, nil
}

// ready returns the board's encoding, reading the shards' records once per
// Board: a board some shard records is read and written as recorded (if
// this Board's configuration can decode it); a new board gets
// cfg.Encoding, EncodingMember by default. Write scripts check the record
// again, so a Board that raced another one configured otherwise is refused
// too. A board whose shards are part packed, part member is being switched
// by Migrate: ready waits for the switch to end, up to switchWait, then
// returns ErrMigrating.
func (b *Board) ready(ctx context.Context) (Encoding, error) {
	if l := Encoding(b.layout.Load()); l != EncodingAuto {
		return l, nil
	}
	stored, err := b.recorded(ctx)
	for wait := time.Millisecond; err == nil && stored == mixedRecords; wait *= 2 {
		if wait > switchWait {
			return 0, fmt.Errorf("%w: %s has shards in both encodings: run Migrate to finish", ErrMigrating, b.cfg.Name)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(wait):
		}
		stored, err = b.recorded(ctx)
	}
	if err != nil {
		return 0, err
	}
	l := b.cfg.Encoding
	switch {
	case stored == "" && l == EncodingAuto:
		l = EncodingMember
	case stored == b.memberID && l != EncodingPacked:
		l = EncodingMember
	case stored != "" && stored == b.packed.id && l != EncodingMember && b.cfg.Order == Descending && b.cfg.Ties == Ordinal:
		l = EncodingPacked
	case stored != "":
		mine := b.memberID
		if l == EncodingPacked {
			mine = b.packed.id
		}
		return 0, fmt.Errorf("%w: board %s was written as %q, this Board uses %q (order %d, ties %d)", ErrEncodingMismatch, b.cfg.Name, stored, mine, b.cfg.Order, b.cfg.Ties)
	}
	b.layout.Store(int32(l))
	return l, nil
}

// switchWait bounds how long an operation waits for a Migrate's switch, one
// pipelined script call per shard, to end.
const switchWait = time.Second

// mixedRecords is what recorded returns for a board whose shards record
// this Board's packed encoding and its member one: a Migrate's switch.
const mixedRecords = "\x00mixed"

// recorded reads every shard's encoding record and returns the one they
// share ("" when none has any), or mixedRecords.
func (b *Board) recorded(ctx context.Context) (string, error) {
	pipe := b.c.Pipeline()
	cmds := make([]*redis.StringCmd, len(b.encoded))
	for i, k := range b.encoded {
		cmds[i] = pipe.Get(ctx, k)
	}
	pipe.Exec(ctx)
	stored := ""
	for _, cmd := range cmds {
		s, err := cmd.Result()
		if isNil(err) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("rank: read encoding of %s: %w", b.cfg.Name, err)
		}
		if stored != "" && s != stored {
			if b.packed.id != "" && (stored == b.packed.id && s == b.memberID || stored == b.memberID && s == b.packed.id) {
				return mixedRecords, nil
			}
			return "", fmt.Errorf("%w: board %s has shards written as %q and as %q", ErrEncodingMismatch, b.cfg.Name, stored, s)
		}
		stored = s
	}
	return stored, nil
}

// settled runs read in the board's encoding. On a packed board it then
// reads the shards' records again: if a Migrate switched any of them
// meanwhile, what read saw may have been decoded in the wrong encoding, so
// it runs again in the new one. A record is switched in the same atomic
// step as its shard's entries, so a record still packed after the read
// means the read saw packed entries. Packed boards pay this one more round
// trip per read; EncodingMember boards, which no Migrate changes, nothing.
func (b *Board) settled(ctx context.Context, read func(l Encoding) error) error {
	for {
		l, err := b.ready(ctx)
		if err != nil {
			return err
		}
		err = read(l)
		if l != EncodingPacked {
			return err
		}
		stored, rerr := b.recorded(ctx)
		if rerr != nil {
			return rerr
		}
		if stored == "" || stored == b.packed.id {
			return err
		}
		b.layout.CompareAndSwap(int32(EncodingPacked), int32(EncodingAuto))
	}
}

// MaxScore is the largest score the board accepts: 2^53−1, or a packed
// board's limit. It is known once the board's encoding has been read (by
// any read or write); before, it is 2^53−1.
func (b *Board) MaxScore() int64 {
	if b.isPacked() {
		return b.packed.maxScore
	}
	return maxScore
}

// MinScore is the smallest score the board accepts: −(2^53−1), or 0 on a
// packed board.
func (b *Board) MinScore() int64 {
	if b.isPacked() {
		return 0
	}
	return -maxScore
}

// expiry is when the board's keys expire, in Unix ms; 0 for never.
func (b *Board) expiry() int64 {
	if b.isPacked() {
		return b.packed.expireMs
	}
	return b.expireMs
}

func (b *Board) isPacked() bool {
	l := Encoding(b.layout.Load())
	return l == EncodingPacked || l == EncodingAuto && b.cfg.Encoding == EncodingPacked
}

// Period returns the interval in which the board accepts writes: [Epoch,
// Epoch+Lifetime), with zero times for an open end.
func (b *Board) Period() (start, end time.Time) {
	if b.cfg.Lifetime > 0 {
		end = b.cfg.Epoch.Add(b.cfg.Lifetime)
	}
	return b.cfg.Epoch, end
}

// Keys returns the sorted-set keys, one per shard.
func (b *Board) Keys() []string { return append([]string(nil), b.shards...) }

func (b *Board) shardOf(member string) int {
	return int(xxhash.Sum64String(member) % uint64(len(b.shards)))
}

// checkTime refuses a write at t outside the board's period.
func (b *Board) checkTime(t time.Time, l Encoding) error {
	start, end := b.cfg.Epoch, b.cfg.Epoch.Add(b.cfg.Lifetime)
	if l == EncodingPacked {
		end = b.cfg.Epoch.Add(b.packed.lifetime)
	} else if b.cfg.Lifetime == 0 {
		end = time.Time{}
	}
	if !start.IsZero() && t.Before(start) || !end.IsZero() && !t.Before(end) {
		return fmt.Errorf("%w: %v is outside [%v, %v)", ErrTimeRange, t, start, end)
	}
	return nil
}

// rest is the low part of a packed board's stored value written at t.
func (b *Board) rest(t time.Time) uint64 {
	tick := uint64(t.Sub(b.cfg.Epoch) / b.cfg.Resolution)
	return b.packed.span - 1 - tick
}

// prefixLen is the width of an EncodingMember member's tie-break prefix.
const prefixLen = 8

// prefix is the tie-break prefix of a write at t: the time in ns, rounded
// down to the Resolution, as 8 big-endian bytes, complemented so that an
// earlier time sorts greater — Redis' reverse order, the board's order,
// lists equal scores by greater member first.
func (b *Board) prefix(t time.Time) string {
	ns := t.UnixNano()
	res := int64(b.cfg.Resolution)
	ns -= ((ns % res) + res) % res
	return prefixOf(ns)
}

// prefixOf is the tie-break prefix of the instant ns.
func prefixOf(ns int64) string {
	var p [prefixLen]byte
	binary.BigEndian.PutUint64(p[:], uint64(ns)^(1<<63-1))
	return string(p[:])
}

// Entry is a member's place on a board.
type Entry struct {
	Member string    `json:"member"`
	Score  int64     `json:"score"`
	Rank   int64     `json:"rank"` // 1-based, numbered as Config.Ties says
	At     time.Time `json:"at"`   // when the member reached Score, to the Resolution

	value   int64  // the stored sorted-set score
	key     string // the stored sorted-set member
	ordinal int64  // the Ordinal rank, whatever the Ties mode
}

// decode makes the entry of a sorted-set member and score.
func (b *Board) decode(key string, score float64) (Entry, bool) {
	v := int64(score)
	if b.isPacked() {
		return b.decodePacked(key, v), true
	}
	if len(key) <= prefixLen {
		return Entry{}, false
	}
	ns := int64(binary.BigEndian.Uint64([]byte(key[:prefixLen])) ^ (1<<63 - 1))
	return Entry{Member: key[prefixLen:], Score: b.sign * v, At: time.Unix(0, ns), value: v, key: key}, true
}

// decodePacked makes the entry of a packed board's member and value.
func (b *Board) decodePacked(key string, v int64) Entry {
	tick := b.packed.span - 1 - uint64(v)%b.packed.span
	return Entry{
		Member: key,
		Score:  int64(uint64(v) / b.packed.span),
		At:     b.cfg.Epoch.Add(time.Duration(tick) * b.cfg.Resolution),
		value:  v,
		key:    key,
	}
}

// before reports whether a ranks above b: greater stored value, then, as in
// Redis' reverse order, greater stored member.
func before(a, b Entry) bool {
	return a.value > b.value || a.value == b.value && a.key > b.key
}
