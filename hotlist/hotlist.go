package hotlist

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/casebook-dev/casebook/internal/keys"
)

// Model is how a list turns events into heat.
type Model uint8

const (
	// Decay is forward exponential decay: an event of weight w at time t adds
	// w·2^((t−L)/HalfLife) once, against a landmark L; the heat now is the
	// sum times 2^((L−now)/HalfLife), which is Σ w·2^(−age/HalfLife).
	Decay Model = iota + 1
	// Window is a sliding window: a ring of Slots slots of SlotLength; the
	// heat is the weighted sum of the events in the live slots.
	Window
)

func (m Model) String() string {
	switch m {
	case Decay:
		return "decay"
	case Window:
		return "window"
	}
	return "Model(" + strconv.Itoa(int(m)) + ")"
}

var (
	// ErrConfig is wrapped by every configuration error.
	ErrConfig = errors.New("hotlist: bad config")
	// ErrRejected is returned by Claim.Add when some events of a batch were
	// rejected (the others were applied); it also wraps the first event's
	// reason: ErrUnknownKind, ErrFuture, ErrWrongPartition or ErrNoUser.
	ErrRejected = errors.New("hotlist: events rejected")
	// ErrUnknownKind: the event's kind has no weight in Config.Weights.
	ErrUnknownKind = errors.New("hotlist: unknown event kind")
	// ErrFuture: the event is later than the aggregator's clock plus MaxSkew.
	ErrFuture = errors.New("hotlist: event time in the future")
	// ErrWrongPartition: the event's item does not belong to the partition
	// it arrived on (PartitionOf), so it would split the item's heat.
	ErrWrongPartition = errors.New("hotlist: item on the wrong partition")
	// ErrNoUser: a like without a user while Config.DedupLikes is set.
	ErrNoUser = errors.New("hotlist: like without a user")
	// ErrResync is returned by a Claim whose partition's stored offset is not
	// the one it started from: another consumer applied offsets it also
	// holds (a rebalance overlap), or Redis lost writes (a failover). The
	// claim dropped what it held and is closed; consume again from a new
	// Claim's Resume offset.
	ErrResync = errors.New("hotlist: partition must be re-read")
	// ErrNoSnapshot is returned by the cached readers before the first
	// Publish.
	ErrNoSnapshot = errors.New("hotlist: no snapshot published yet")
	// ErrClosed is returned by a Claim used after it was released or
	// resynced.
	ErrClosed = errors.New("hotlist: claim closed")
	// ErrInvalid is wrapped by the errors of bad arguments (a Top size, a
	// partition, an item or a pin position out of range); nothing changed.
	ErrInvalid = errors.New("hotlist: invalid argument")
)

// Config configures a List. Every process that writes or reads one list must
// use the same Name, Namespace, Partitions, Model, Weights, HalfLife,
// RescaleEvery, Slots, SlotLength and DedupWindow.
type Config struct {
	// Name of the list. Partition p's keys are
	// "<Namespace>:{<Name>:<p>}:meta|heat:0|heat:1|slot:<n>|likes:<n>", the
	// read side's "<Namespace>:{<Name>:read}:snap|pins|blocks". Required.
	Name string
	// Namespace prefixes every key.
	Namespace string
	// Partitions is the partition count of the Kafka topic that feeds the
	// list: partition p lives under its own hash tag, so on a Redis Cluster
	// the partitions spread over the shards. Required, 1..4096.
	Partitions int
	// Model is Decay or Window. Default Decay.
	Model Model
	// Weights gives each event kind its weight (finite, 0..1e9); events of
	// kinds not listed are rejected. Default DefaultWeights().
	Weights map[Kind]float64

	// HalfLife (Decay) is how long until an event counts half: whole
	// milliseconds, at least 1 ms. Default 1 h.
	HalfLife time.Duration
	// RescaleEvery (Decay) is how many half-lives apart the landmarks are
	// (1..256). A partition moves to the next landmark once the clock passes
	// it, dividing its stored heats by 2^RescaleEvery (exactly: a power of
	// two). Between landmarks a stored heat grows by at most 2^RescaleEvery
	// per event weight, far from float64's 2^1024. Default 64.
	RescaleEvery int
	// RescaleChunk is how many items one flush reads into the next heat set
	// while a partition builds it — the next landmark's (Decay), or the
	// coming slot's window totals (Window, Slots lookups per item): it
	// bounds how long a flush holds Redis: a Decay move's flushes took 3 ms
	// on average and 4.6 ms at most per 1000 items here (wall time on
	// loopback, BenchmarkRescaleChunk), Window reads Slots sets per item.
	// Default 1000 (1..10000).
	RescaleChunk int

	// Slots (Window) is the number of slots in the ring. Default 12.
	Slots int
	// SlotLength (Window) is the length of a slot, whole milliseconds.
	// Default 5 min.
	SlotLength time.Duration
	// SlotWeights (Window), one per slot, weigh the live slots: index 0 is
	// the current slot, index Slots−1 the oldest. Finite, 0..1e9. Default all 1.
	SlotWeights []float64

	// Keep is how many items each partition keeps (Decay), or each partition
	// per slot (Window, whose window totals then hold up to Slots × Keep):
	// the coolest beyond it are trimmed after each flush. Top(n) needs
	// n ≤ Keep. Default 10,000.
	Keep int
	// DedupLikes counts one Like per user per item per DedupWindow: likes
	// without a user are rejected. It costs a Redis set entry per distinct
	// (item, user) like, kept for up to two DedupWindows.
	DedupLikes bool
	// DedupWindow is the period within which a user's likes of one item
	// count once. Default the window (Window) or 24 h (Decay).
	DedupWindow time.Duration
	// MaxSkew is how far ahead of the aggregator's clock an event may be;
	// later events are rejected (ErrFuture). Default 1 min.
	MaxSkew time.Duration

	// SnapshotSize is how many entries Publish stores. Default 100.
	SnapshotSize int
	// Refresh is how often RunPublisher publishes. Default 1 min.
	Refresh time.Duration
	// CacheTTL is how old a snapshot TopCached may serve from process memory.
	// Default 1 s.
	CacheTTL time.Duration
	// Now is the clock, for tests. Default time.Now (and then TopCached's
	// copy is marked stale by a timer rather than by reading the clock).
	Now func() time.Time

	// MeterProvider and TracerProvider receive the list's and its
	// aggregators' metrics and spans (doc.go, Observability). Default the
	// global ones.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// List is a trending list over Redis. It is safe for concurrent use.
type List struct {
	c   redis.UniversalClient
	cfg Config

	space keys.Space
	parts []partKeys
	snap  string // snapshot hash
	pins  string // pinned items: item → position
	block string // blocked items

	weights  [256]float64
	weighted [256]bool
	halfMs   float64 // Decay
	epochMs  int64   // Decay: RescaleEvery half-lives
	slotMs   int64   // Window
	dedupMs  int64
	skewMs   int64

	realClock bool // Config.Now was not set
	flight    singleflight.Group
	cached    atomic.Pointer[view]

	obs *instruments
}

type partKeys struct {
	tag  string
	meta string
	heat [2]string // even and odd epochs
}

// New returns a list on c (a single node, Sentinel or Cluster client).
func New(c redis.UniversalClient, cfg Config) (*List, error) {
	cfg.Model = cmp.Or(cfg.Model, Decay)
	if cfg.Weights == nil {
		cfg.Weights = DefaultWeights()
	}
	cfg.HalfLife = cmp.Or(cfg.HalfLife, time.Hour)
	cfg.RescaleEvery = cmp.Or(cfg.RescaleEvery, 64)
	cfg.RescaleChunk = cmp.Or(cfg.RescaleChunk, 1000)
	cfg.Slots = cmp.Or(cfg.Slots, 12)
	cfg.SlotLength = cmp.Or(cfg.SlotLength, 5*time.Minute)
	if cfg.SlotWeights == nil && cfg.Slots > 0 {
		cfg.SlotWeights = make([]float64, cfg.Slots)
		for i := range cfg.SlotWeights {
			cfg.SlotWeights[i] = 1
		}
	}
	cfg.Keep = cmp.Or(cfg.Keep, 10_000)
	if cfg.Model == Window {
		cfg.DedupWindow = cmp.Or(cfg.DedupWindow, time.Duration(cfg.Slots)*cfg.SlotLength)
	}
	cfg.DedupWindow = cmp.Or(cfg.DedupWindow, 24*time.Hour)
	cfg.MaxSkew = cmp.Or(cfg.MaxSkew, time.Minute)
	cfg.SnapshotSize = cmp.Or(cfg.SnapshotSize, 100)
	cfg.Refresh = cmp.Or(cfg.Refresh, time.Minute)
	cfg.CacheTTL = cmp.Or(cfg.CacheTTL, time.Second)
	realClock := cfg.Now == nil
	if realClock {
		cfg.Now = time.Now
	}
	if err := validate(c, &cfg); err != nil {
		return nil, err
	}

	l := &List{c: c, cfg: cfg, space: keys.NewSpace(cfg.Namespace), realClock: realClock}
	for k, w := range cfg.Weights {
		l.weights[k], l.weighted[k] = w, true
	}
	l.halfMs = float64(cfg.HalfLife.Milliseconds())
	l.epochMs = cfg.HalfLife.Milliseconds() * int64(cfg.RescaleEvery)
	l.slotMs = cfg.SlotLength.Milliseconds()
	l.dedupMs = cfg.DedupWindow.Milliseconds()
	l.skewMs = cfg.MaxSkew.Milliseconds()
	for p := range cfg.Partitions {
		tag := cfg.Name + ":" + strconv.Itoa(p)
		l.parts = append(l.parts, partKeys{
			tag:  tag,
			meta: l.space.Key(tag, "meta"),
			heat: [2]string{l.space.Key(tag, "heat", "0"), l.space.Key(tag, "heat", "1")},
		})
	}
	read := cfg.Name + ":read"
	l.snap, l.pins, l.block = l.space.Key(read, "snap"), l.space.Key(read, "pins"), l.space.Key(read, "blocks")
	l.obs = newInstruments(cfg.Name, cfg.MeterProvider, cfg.TracerProvider)
	return l, nil
}

func validate(c redis.UniversalClient, cfg *Config) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	wholeMs := func(d time.Duration) bool { return d >= time.Millisecond && d%time.Millisecond == 0 }
	switch {
	case c == nil:
		return bad("nil client")
	case cfg.Name == "":
		return bad("empty name")
	case cfg.Partitions < 1 || cfg.Partitions > 4096:
		return bad("%d partitions (1..4096)", cfg.Partitions)
	case cfg.Model != Decay && cfg.Model != Window:
		return bad("model %v", cfg.Model)
	case len(cfg.Weights) == 0:
		return bad("no event weights")
	case !wholeMs(cfg.HalfLife):
		return bad("half-life %v is not a whole number of milliseconds", cfg.HalfLife)
	case cfg.RescaleEvery < 1 || cfg.RescaleEvery > 256:
		return bad("rescale every %d half-lives (1..256)", cfg.RescaleEvery)
	case cfg.RescaleChunk < 1 || cfg.RescaleChunk > 10_000:
		return bad("rescale chunk %d (1..10000)", cfg.RescaleChunk)
	case cfg.Slots < 1 || cfg.Slots > 1024:
		return bad("%d slots (1..1024)", cfg.Slots)
	case !wholeMs(cfg.SlotLength):
		return bad("slot length %v is not a whole number of milliseconds", cfg.SlotLength)
	case len(cfg.SlotWeights) != cfg.Slots:
		return bad("%d slot weights for %d slots", len(cfg.SlotWeights), cfg.Slots)
	case cfg.Keep < 1 || cfg.Keep > 1_000_000:
		return bad("keep %d (1..1000000)", cfg.Keep)
	case !wholeMs(cfg.DedupWindow):
		return bad("dedup window %v is not a whole number of milliseconds", cfg.DedupWindow)
	case cfg.MaxSkew < 0:
		return bad("max skew %v is negative", cfg.MaxSkew)
	case cfg.SnapshotSize < 1 || cfg.SnapshotSize > cfg.Keep:
		return bad("snapshot size %d (1..Keep=%d)", cfg.SnapshotSize, cfg.Keep)
	case cfg.Refresh <= 0 || cfg.CacheTTL <= 0:
		return bad("refresh %v and cache TTL %v must be positive", cfg.Refresh, cfg.CacheTTL)
	}
	for k, w := range cfg.Weights {
		if k == 0 {
			return bad("kind 0 has a weight")
		}
		if !validWeight(w) {
			return bad("kind %d weighs %v (finite, 0..1e9)", k, w)
		}
	}
	for i, w := range cfg.SlotWeights {
		if !validWeight(w) {
			return bad("slot %d weighs %v (finite, 0..1e9)", i, w)
		}
	}
	return nil
}

// validWeight refuses NaN (every comparison with it is false), infinities
// and negatives: a heat must only grow with events, or decay could not be
// applied once.
func validWeight(w float64) bool { return w >= 0 && w <= 1e9 } // NaN fails both

// Partitions returns the number of partitions.
func (l *List) Partitions() int { return len(l.parts) }

// Model returns the list's heat model.
func (l *List) Model() Model { return l.cfg.Model }

// epochOf is the decay landmark number at ms: landmark e is at
// e·RescaleEvery half-lives after the Unix epoch.
func (l *List) epochOf(ms int64) int64 { return floorDiv(ms, l.epochMs) }

// slotOf is the window slot holding ms.
func (l *List) slotOf(ms int64) int64 { return floorDiv(ms, l.slotMs) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func (l *List) slotKey(p int, slot int64) string {
	return l.space.Key(l.parts[p].tag, "slot", strconv.FormatInt(slot, 10))
}

func (l *List) likesKey(p int, bucket int64) string {
	return l.space.Key(l.parts[p].tag, "likes", strconv.FormatInt(bucket, 10))
}
