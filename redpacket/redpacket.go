package redpacket

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

var (
	// ErrConfig is wrapped by every configuration error.
	ErrConfig = errors.New("redpacket: bad config")
	// ErrInvalid is wrapped by errors about bad input (a packet id ≤ 0 at
	// every entry point, a packet for one recipient with more than one
	// share); nothing was written.
	ErrInvalid = errors.New("redpacket: invalid input")
	// ErrInsufficientFunds is returned by Send when the sender's balance is
	// below the total; nothing was written.
	ErrInsufficientFunds = errors.New("redpacket: insufficient funds")
	// ErrNotFound is returned for a packet that does not exist.
	ErrNotFound = errors.New("redpacket: no such packet")
	// ErrExpired is returned for a packet past its expiry.
	ErrExpired = errors.New("redpacket: packet expired")
	// ErrEmpty is returned when every share is taken.
	ErrEmpty = errors.New("redpacket: packet is empty")
	// ErrAlreadyClaimed is returned by Grab to a user who holds a share
	// (Open returns that share again instead).
	ErrAlreadyClaimed = errors.New("redpacket: already claimed")
	// ErrNotRecipient is returned when a packet meant for one user is
	// opened by another.
	ErrNotRecipient = errors.New("redpacket: packet is for someone else")
	// ErrNotExpired is returned by Refund before the packet's expiry.
	ErrNotExpired = errors.New("redpacket: packet not expired yet")
	// ErrFence is returned by Refund while claims Redis accepted that SQL
	// can still take are not in SQL yet (the outbox or the consumer is
	// behind), or while a packet whose Redis state is gone waits out
	// LostStateGrace: try again later. The packet is closed already.
	ErrFence = errors.New("redpacket: claims still on their way to SQL")
	// ErrBadMessage is a claim message that can never be applied —
	// malformed, or a claim that is not one of the packet's drawn shares
	// (index and amount), or that the ledger contradicts; it is marked
	// outbox.ErrPoison.
	ErrBadMessage = errors.New("redpacket: bad claim message")
	// ErrLateClaim is a claim SQL cannot take — its packet was refunded,
	// or its share went to another user first — which only happens when
	// Redis lost some of the packet's state (claims it had relayed, or the
	// refund's close). It is not credited (that would create money); it is
	// marked poison, so the consumer counts and dead-letters it for a
	// person to settle.
	ErrLateClaim = errors.New("redpacket: claim after the refund")
)

// Config configures a Service. Zero values take the defaults in brackets.
type Config struct {
	// TablesPerDB is how many tables each database holds per logical table
	// [8]; the total must be a power of two ≤ 65,536.
	TablesPerDB int
	// Namespace prefixes every Redis key.
	Namespace string
	// Buckets is how many hash tags packets are spread over [256]: a
	// packet's keys share its bucket's tag with the bucket's outbox stream.
	// Fixed for the life of the data.
	Buckets int
	// MaxCount is the most shares a packet may have [500].
	MaxCount int
	// MaxTotal is the largest packet, in fen [20,000 yuan].
	MaxTotal int64
	// Expiry is how long a packet can be opened [24h]; then its remainder is
	// refunded.
	Expiry time.Duration
	// LostStateGrace is how long after expiry a packet whose Redis state is
	// gone (a failover or restart lost it) is refunded from the SQL ledger
	// alone, without the fence [1h].
	LostStateGrace time.Duration
	// Intn draws random numbers for Random shares [math/rand/v2].
	Intn func(int64) int64
	// Now is the clock [time.Now].
	Now func() time.Time
	// MeterProvider and TracerProvider receive the block's metrics and
	// spans [nil: OpenTelemetry's global providers; while the service has
	// installed none, instrumentation costs nothing]. See "Observability"
	// in the package documentation for the instruments.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Logger, when set, hears of refunds that wait (fenced: at Info while
	// claims are on their way to SQL, at Warn when the packet's Redis
	// state is gone) and of a refund made from SQL alone after that
	// state was lost (Warn). Nil: silent.
	Logger *slog.Logger
}

// Service sends, opens and refunds red packets. It is safe for concurrent
// use.
type Service struct {
	rdb    redis.UniversalClient
	dbs    []*sqlx.DB
	cfg    Config
	router *shard.Router // packets, claims, wallets, received: by user gene
	genes  idgen.Genes
	space  keys.Space
	idSrc  *idgen.SQLSource
	ids    *gene.IDs
	obs    *instruments
	log    *slog.Logger
}

// New returns a Service over dbs (all "mysql" or all "sqlite") with rdb
// for the live packets.
func New(rdb redis.UniversalClient, dbs []*sqlx.DB, cfg Config) (*Service, error) {
	cfg.TablesPerDB = cmp.Or(cfg.TablesPerDB, 8)
	cfg.Buckets = cmp.Or(cfg.Buckets, 256)
	cfg.MaxCount = cmp.Or(cfg.MaxCount, 500)
	cfg.MaxTotal = cmp.Or(cfg.MaxTotal, 20_000*100)
	cfg.Expiry = cmp.Or(cfg.Expiry, 24*time.Hour)
	cfg.LostStateGrace = cmp.Or(cfg.LostStateGrace, time.Hour)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if rdb == nil || len(dbs) == 0 {
		return nil, fmt.Errorf("%w: a Redis client and at least one database are required", ErrConfig)
	}
	if err := gene.CheckDatabases(dbs, cfg.TablesPerDB, "redpacket"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	switch {
	case cfg.Buckets < 1 || cfg.Buckets > 16384 || cfg.MaxCount < 1 || cfg.MaxTotal < 1:
		return nil, fmt.Errorf("%w: buckets %d, max count %d, max total %d", ErrConfig, cfg.Buckets, cfg.MaxCount, cfg.MaxTotal)
	case cfg.Expiry < time.Second || cfg.LostStateGrace < 0:
		return nil, fmt.Errorf("%w: expiry %v, grace %v", ErrConfig, cfg.Expiry, cfg.LostStateGrace)
	}
	router, err := shard.New(dbs, shard.Config{Table: "rp_packets", TablesPerDB: cfg.TablesPerDB})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	idSrc, err := idgen.NewSQLSource(dbs[0], "rp_ids")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &Service{rdb: rdb, dbs: dbs, cfg: cfg, router: router, genes: gene.Genes, idSrc: idSrc,
		ids: gene.NewIDs(idSrc, "packet", 1000), space: keys.NewSpace(keys.Join(cfg.Namespace, "rp")),
		obs: newInstruments(cfg.MeterProvider, cfg.TracerProvider), log: obs.Logger(cfg.Logger, "redpacket")}, nil
}

// Close stops the id segment's background lease; safe to call twice.
func (s *Service) Close() error {
	s.ids.Close()
	return nil
}

// newID returns a packet number carrying user's gene (it lives in the
// sender's shard).
func (s *Service) newID(ctx context.Context, user string) (int64, error) {
	id, err := s.ids.Next(ctx, s.genes.Of(user))
	if err != nil {
		return 0, fmt.Errorf("redpacket: %w", err)
	}
	return id, nil
}

func (s *Service) shardOfUser(user string) shard.Shard { return s.router.ByGene(s.genes.Of(user)) }
func (s *Service) shardOfPacket(id int64) shard.Shard  { return s.router.ByGene(s.genes.Gene(id)) }

// bucketTag is the hash tag of a packet's keys and its bucket's outbox.
func (s *Service) bucketTag(id int64) string {
	return "b" + strconv.Itoa(s.Bucket(id))
}

// packetKeys are a packet's Redis keys: its state hash (expiry, recipient,
// claim counters, and each claim as "u:<user>" → fen) and its list of
// shares not yet taken.
func (s *Service) packetKeys(id int64) (state, shares string) {
	p, tag := strconv.FormatInt(id, 10), s.bucketTag(id)
	return s.space.Key(tag, "p", p), s.space.Key(tag, "p", p, "shares")
}

func (s *Service) outboxOf(id int64) string { return s.space.Key(s.bucketTag(id), "outbox") }

// Outboxes lists the claim streams, one per bucket, for an outbox.Relay.
func (s *Service) Outboxes() []string {
	out := make([]string, s.cfg.Buckets)
	for b := range out {
		out[b] = s.space.Key("b"+strconv.Itoa(b), "outbox")
	}
	return out
}

func validUser(user string) error {
	if err := gene.ValidID(user); err != nil {
		return fmt.Errorf("%w: user %w", ErrInvalid, err)
	}
	return nil
}

// validPacket refuses a packet id no packet can have, the same way at every
// entry point.
func validPacket(id int64) error {
	if id <= 0 {
		return fmt.Errorf("%w: packet %d", ErrInvalid, id)
	}
	return nil
}

func (s *Service) now() int64 { return s.cfg.Now().UnixMilli() }

// inTx runs fn in a transaction on db, again from the start when the
// database aborted it for a deadlock or a busy lock.
func inTx(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	return sqlutil.InTx(ctx, db, fn)
}
