package order

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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
	ErrConfig = errors.New("order: bad config")
	// ErrInvalid is wrapped by errors about bad input (a user id, a
	// quantity, a SKU); nothing was written.
	ErrInvalid = errors.New("order: invalid input")
	// ErrNotFound is returned for an order, payment or SKU that does not
	// exist.
	ErrNotFound = errors.New("order: not found")
	// ErrIllegalTransition is returned when an order is not in a state the
	// operation may leave (paying a closed order, shipping an unpaid one);
	// nothing was changed.
	ErrIllegalTransition = errors.New("order: illegal transition")
	// ErrConflict is returned when the order changed under a transition
	// (another writer won); read it again and decide anew.
	ErrConflict = errors.New("order: concurrent update")
	// ErrOutOfStock is returned by Create when a SKU has too few units; the
	// order is closed with reason ReasonOutOfStock.
	ErrOutOfStock = errors.New("order: out of stock")
	// ErrHanging is returned by a reservation that arrives after its cancel
	// (a "hanging" try): it is refused and changes nothing.
	ErrHanging = errors.New("order: reservation after its cancel")
	// ErrRefundTooLarge is returned for a refund above what is left of the
	// paid amount.
	ErrRefundTooLarge = errors.New("order: refund exceeds the paid amount")
	// ErrQuantity is returned for a parcel or a line refund that asks for
	// more units of a line than it has left (to ship, or not yet refunded);
	// nothing was changed.
	ErrQuantity = errors.New("order: more units than the line has left")
	// ErrCallback is wrapped by payment callbacks that are refused (amount or
	// currency mismatch, unknown payment); they are recorded, never applied.
	ErrCallback = errors.New("order: payment callback refused")
)

// Config configures a Service. Zero values take the defaults in brackets.
type Config struct {
	// TablesPerDB is how many tables each database holds per logical table
	// [8]: with 8 databases, 64 order tables (the seed's 8 × 8). The total
	// must be a power of two ≤ 65,536, so that an order id's gene routes it.
	TablesPerDB int
	// Namespace prefixes every Redis key (the delay queues).
	Namespace string
	// Currency of every order and payment, ISO 4217 [CNY].
	Currency string
	// PayTimeout is how long an order waits for payment before it is closed
	// and its reservations released [30m].
	PayTimeout time.Duration
	// AutoComplete is how long after shipping an order completes unless the
	// buyer confirms first [240h, 10 days].
	AutoComplete time.Duration
	// IDStep is how many order numbers one lease of the id segment holds
	// [1,000].
	IDStep int64
	// Now is the clock [time.Now].
	Now func() time.Time
	// ReadReplicas, when set, holds one replica per database, in the same
	// order: the operators' queries (Search, Stats, Daily) read them, so
	// scanning every table does not load the primaries. A replica lags its
	// primary, so those answers may miss the last moments; everything else
	// (Get, UserOrders, every write) stays on the primaries.
	ReadReplicas []*sqlx.DB
	// MeterProvider and TracerProvider receive the Service's metrics and
	// spans (doc.go, Observability); nil means the global ones, which cost
	// nothing until the service installs a provider.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Logger, when set, hears of the jobs a service runs on a schedule: a
	// difference Reconcile finds for the first time (Warn, once per
	// difference, as the review table records it) and a due order RunDue
	// could not move and queued again (Warn). Nil: silent.
	Logger *slog.Logger
}

// Service records orders, their inventory reservations and payments in
// sharded SQL. It is safe for concurrent use.
type Service struct {
	rdb       redis.UniversalClient
	dbs       []*sqlx.DB
	cfg       Config
	orders    *shard.Router // orders, payments, callbacks, refunds: by user gene
	reports   *shard.Router // the same tables on ReadReplicas (or the primaries)
	inventory *shard.Router // inventory and reservation barriers: by SKU
	genes     idgen.Genes
	space     keys.Space
	idSource  *idgen.SQLSource
	ids       *gene.IDs
	obs       *instruments
	log       *slog.Logger
}

// New returns a Service over dbs (N databases; the README's 8 for the seed),
// with rdb for the delay queues. Every database must use the same driver:
// "mysql" (MySQL 8, MariaDB 10.6+) or "sqlite".
func New(rdb redis.UniversalClient, dbs []*sqlx.DB, cfg Config) (*Service, error) {
	cfg.TablesPerDB = cmp.Or(cfg.TablesPerDB, 8)
	cfg.Currency = cmp.Or(cfg.Currency, "CNY")
	cfg.PayTimeout = cmp.Or(cfg.PayTimeout, 30*time.Minute)
	cfg.AutoComplete = cmp.Or(cfg.AutoComplete, 240*time.Hour)
	cfg.IDStep = cmp.Or(cfg.IDStep, 1000)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if rdb == nil || len(dbs) == 0 {
		return nil, fmt.Errorf("%w: a Redis client and at least one database are required", ErrConfig)
	}
	if err := gene.CheckDatabases(dbs, cfg.TablesPerDB, "order"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	switch {
	case len(cfg.Currency) != 3 || strings.ToUpper(cfg.Currency) != cfg.Currency:
		return nil, fmt.Errorf("%w: currency %q (ISO 4217, e.g. CNY)", ErrConfig, cfg.Currency)
	case cfg.PayTimeout < 0 || cfg.AutoComplete < 0 || cfg.IDStep < 1:
		return nil, fmt.Errorf("%w: negative timeout or step", ErrConfig)
	}
	orders, err := shard.New(dbs, shard.Config{Table: "orders", TablesPerDB: cfg.TablesPerDB})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	inventory, err := shard.New(dbs, shard.Config{Table: "inventory", TablesPerDB: cfg.TablesPerDB})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	reports := orders
	if cfg.ReadReplicas != nil {
		if len(cfg.ReadReplicas) != len(dbs) {
			return nil, fmt.Errorf("%w: %d read replicas for %d databases (one each, in order)", ErrConfig, len(cfg.ReadReplicas), len(dbs))
		}
		if err := gene.CheckDatabases(cfg.ReadReplicas, cfg.TablesPerDB, "order"); err != nil {
			return nil, fmt.Errorf("%w: read replicas: %w", ErrConfig, err)
		}
		if reports, err = shard.New(cfg.ReadReplicas, shard.Config{Table: "orders", TablesPerDB: cfg.TablesPerDB}); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	idSource, err := idgen.NewSQLSource(dbs[0], "order_ids")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	s := &Service{
		rdb: rdb, dbs: dbs, cfg: cfg, orders: orders, reports: reports, inventory: inventory, idSource: idSource, genes: gene.Genes,
		ids: gene.NewIDs(idSource, "order", cfg.IDStep), space: keys.NewSpace(keys.Join(cfg.Namespace, "order")),
	}
	s.obs = newInstruments(s, cfg.MeterProvider, cfg.TracerProvider)
	s.log = obs.Logger(cfg.Logger, "order")
	return s, nil
}

// Close stops the id segment's background lease and the overdue gauge. It
// is safe to call twice; the databases and Redis client are the caller's.
func (s *Service) Close() error {
	s.ids.Close()
	return s.obs.gauges.Close()
}

// isMySQL reports the dialect of every database.
func (s *Service) isMySQL() bool { return sqlutil.IsMySQL(s.dbs[0]) }

// newID returns a fresh order or payment number carrying user's gene, so
// that it routes to the user's shard.
func (s *Service) newID(ctx context.Context, user string) (int64, error) {
	return s.newIDWithGene(ctx, s.genes.Of(user))
}

func (s *Service) newIDWithGene(ctx context.Context, g uint64) (int64, error) {
	id, err := s.ids.Next(ctx, g)
	if err != nil {
		return 0, fmt.Errorf("order: %w", err)
	}
	return id, nil
}

// shardOfID returns the order shard an order or payment number routes to.
func (s *Service) shardOfID(id int64) shard.Shard { return s.orders.ByGene(s.genes.Gene(id)) }

// shardOfUser returns the order shard of user.
func (s *Service) shardOfUser(user string) shard.Shard { return s.orders.ByGene(s.genes.Of(user)) }

func validUser(user string) error {
	if err := gene.ValidID(user); err != nil {
		return fmt.Errorf("%w: user %w", ErrInvalid, err)
	}
	return nil
}

func validSKU(sku string) error {
	if err := validUser(sku); err != nil {
		return fmt.Errorf("%w: sku %q", ErrInvalid, sku)
	}
	return nil
}

// dedupeKey makes a unique-key value of at most 64 bytes from a kind and
// the parts that identify one occurrence of it.
func dedupeKey(kind string, parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return kind + ":" + hex.EncodeToString(h[:20])
}

// ms is the storage form of instants: Unix milliseconds.
func ms(t time.Time) int64 { return t.UnixMilli() }

func (s *Service) now() int64 { return ms(s.cfg.Now()) }
