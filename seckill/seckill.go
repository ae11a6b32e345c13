package seckill

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/order"
)

var (
	//go:embed buy.lua
	buyLua string
	//go:embed take.lua
	takeLua string
	//go:embed unquota.lua
	unquotaLua string
	//go:embed close.lua
	closeLua string
	//go:embed rebuild.lua
	rebuildLua string
	//go:embed snapshot.lua
	snapshotLua string

	buyScript      = redis.NewScript(buyLua)
	takeScript     = redis.NewScript(takeLua)
	unquotaScript  = redis.NewScript(unquotaLua)
	closeScript    = redis.NewScript(closeLua)
	rebuildScript  = redis.NewScript(rebuildLua)
	snapshotScript = redis.NewScript(snapshotLua)
)

var (
	ErrSoldOut      = errors.New("seckill: sold out")
	ErrLimitReached = errors.New("seckill: per-user limit reached")
	ErrNotStarted   = errors.New("seckill: campaign not started")
	ErrEnded        = errors.New("seckill: campaign ended")
	ErrRateLimited  = errors.New("seckill: rate limited")
	ErrNoCampaign   = errors.New("seckill: no such campaign")
	ErrInvalid      = errors.New("seckill: invalid input")
	// ErrBadMessage is a malformed order message; it is also
	// outbox.ErrPoison, so consumers skip or dead-letter it.
	ErrBadMessage = errors.New("seckill: bad order message")
	// ErrIDConflict is an order message whose reservation id is recorded
	// for another campaign, buyer or quantity: two reservations were given
	// one id (a misconfigured id generator). It is poison; alert on it.
	ErrIDConflict = errors.New("seckill: reservation id already recorded for another order")
	// ErrStateLost is returned by Buy when Redis lost a bucket's state (a
	// restart without persistence): nothing is sold there until Reconcile
	// with repair rebuilds it from SQL. Buy waits through a rebuild in
	// progress for up to two seconds before answering it.
	ErrStateLost = errors.New("seckill: campaign state lost in Redis, reconcile to rebuild it")
	// ErrNotReplicated is returned by Buy together with a valid reservation
	// id when Config.WaitReplicas replicas did not acknowledge the decision
	// within WaitTimeout: the purchase stands on the master, but a failover
	// now could forget it (see doc.go).
	ErrNotReplicated = errors.New("seckill: purchase not confirmed by replicas")
	// ErrNotReady is returned by OrderOf before the consumer created the
	// reservation's order: retry.
	ErrNotReady = errors.New("seckill: order not recorded yet")
)

// Campaign is one flash sale of one SKU: what Create records, and what an
// open Sale reports.
type Campaign struct {
	ID      string    `db:"id" json:"id"`
	SKU     string    `db:"sku" json:"sku"`     // the campaign's own: Create makes it with Stock units
	Price   int64     `db:"price" json:"price"` // unit price in fen, the order's price
	Stock   int64     `db:"stock" json:"stock"`
	Limit   int64     `db:"per_user" json:"limit"`  // units one user may buy, ≥ 1
	Buckets int       `db:"buckets" json:"buckets"` // stock split over this many keys (slots), ≥ 1
	Starts  time.Time `db:"-" json:"starts"`
	Ends    time.Time `db:"-" json:"ends"`
}

// IDGenerator issues the numbers of reservation ids. *idgen.Snowflake is
// one.
type IDGenerator interface {
	Next(ctx context.Context) (int64, error)
}

// Config configures a Service. Zero values take the defaults in brackets.
type Config struct {
	// Namespace prefixes every Redis key.
	Namespace string
	// IDs numbers reservations; required. Use an *idgen.Snowflake whose
	// node id no other live process uses, with a Checkpoint so that a
	// restart with a clock that went back does not repeat ids. Ids are made
	// here, not by a Redis counter: a failover or a restart from an older
	// snapshot rolls a counter back, and a repeated id would record, pay or
	// release someone else's order.
	IDs IDGenerator
	// PayTimeout is how long a reservation waits for payment before its
	// units and the buyer's quota are released [15m].
	PayTimeout time.Duration
	// RetryWindow is how long a script call that changed state can be sent
	// again — by go-redis after a lost reply, which it does by default — and
	// still be recognised instead of acting twice [30s]. Make it longer than
	// the client's longest retry: MaxRetries × (ReadTimeout + MaxRetryBackoff
	// + DialTimeout) is 3 × (3 s + 0.5 s + 5 s) ≈ 26 s with go-redis'
	// defaults. Must be below PayTimeout. Cost: ~60 bytes of Redis memory per
	// hold, release and payment, kept one to two windows.
	RetryWindow time.Duration
	// WaitReplicas, when above 0, makes every decision a buyer is told
	// about wait (Redis WAIT) until that many replicas of its shard have it,
	// for at most WaitTimeout [100ms]; Buy returns ErrNotReplicated with the
	// id when they did not. It closes most of the window in which a failover
	// forgets acknowledged purchases, at the cost of a replica round trip
	// per decision (BenchmarkBuyWait). Works with a Client, a FailoverClient
	// or a ClusterClient (not a Ring). Set it to at most the replicas per
	// master.
	WaitReplicas int
	WaitTimeout  time.Duration
	// SoldOutFor is how long this process answers ErrSoldOut by itself
	// after a buyer of one unit found the campaign sold out [200ms;
	// negative: never]: the crowd after the last unit costs no Redis call,
	// and a unit that comes back waits at most this long to sell again.
	SoldOutFor time.Duration
	// UserLimit and GlobalLimit rate-limit Buy per user and per campaign at
	// the entrance (zero: no limit).
	UserLimit   redis_rate.Limit
	GlobalLimit redis_rate.Limit
	// Now is the clock [time.Now].
	Now func() time.Time
	// MeterProvider and TracerProvider receive the block's metrics and
	// spans [nil: OpenTelemetry's global providers; while the service has
	// installed none, instrumentation costs nothing]. See "Observability"
	// in the package documentation for the instruments.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Logger, when set, hears of a Batcher's batch whose decision failed
	// (Warn: every buyer in it got the error) and of a Reconcile that found
	// Redis and SQL apart (Warn, with the report) or repaired them (Info).
	// Nil: silent.
	Logger *slog.Logger
}

// Service sells campaigns: Redis is the gate, the order block the record.
// It is safe for concurrent use.
type Service struct {
	rdb     redis.UniversalClient
	db      *sqlx.DB
	orders  *order.Service
	cfg     Config
	space   keys.Space
	limiter *redis_rate.Limiter

	mu    sync.Mutex
	sales map[string]*Sale // opened campaigns: their rules never change

	obs *instruments
	log *slog.Logger
}

// Sale is an open campaign: its rules (stock split, per-user limit, window)
// as SQL recorded them, and the operations on its Redis gate. Get one from
// Service.Open or Service.Create; it is safe for concurrent use.
type Sale struct {
	s       *Service
	c       Campaign
	attrs   attribute.Set // campaignAttrs(c.ID)
	soldOut atomic.Int64  // until when (Config.Now, Unix ns) Buy answers ErrSoldOut locally
}

// Campaign returns the campaign's rules as recorded.
func (sl *Sale) Campaign() Campaign { return sl.c }

// New returns a Service selling through rdb (the gate), recording its
// campaigns in db and its orders, their payments and timeouts in orders.
// Call Migrate once to create the campaign table (and orders' Migrate for
// its own).
func New(rdb redis.UniversalClient, db *sqlx.DB, orders *order.Service, cfg Config) (*Service, error) {
	if rdb == nil || db == nil || orders == nil || cfg.IDs == nil {
		return nil, fmt.Errorf("%w: nil Redis client, database, order service or Config.IDs", ErrInvalid)
	}
	if cfg.PayTimeout == 0 {
		cfg.PayTimeout = 15 * time.Minute
	}
	if cfg.RetryWindow == 0 {
		cfg.RetryWindow = 30 * time.Second
	}
	if cfg.SoldOutFor == 0 {
		cfg.SoldOutFor = 200 * time.Millisecond
	}
	if cfg.WaitTimeout == 0 {
		cfg.WaitTimeout = 100 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RetryWindow < time.Millisecond || cfg.PayTimeout <= cfg.RetryWindow {
		return nil, fmt.Errorf("%w: retry window %v must be ≥ 1ms and below the pay timeout %v", ErrInvalid, cfg.RetryWindow, cfg.PayTimeout)
	}
	if _, ring := rdb.(*redis.Ring); cfg.WaitReplicas < 0 || cfg.WaitTimeout < time.Millisecond || cfg.WaitReplicas > 0 && ring {
		return nil, fmt.Errorf("%w: wait for %d replicas, %v, on a %T", ErrInvalid, cfg.WaitReplicas, cfg.WaitTimeout, rdb)
	}
	s := &Service{rdb: rdb, db: db, orders: orders, cfg: cfg, space: keys.NewSpace(keys.Join(cfg.Namespace, "seckill")),
		limiter: redis_rate.NewLimiter(rdb), sales: map[string]*Sale{}}
	s.obs = newInstruments(s, cfg.MeterProvider, cfg.TracerProvider)
	s.log = obs.Logger(cfg.Logger, "seckill")
	return s, nil
}

// Close stops the stock gauge from being collected (it reads Redis for
// every open campaign at each collection). Safe to call twice; the Service
// still works after it, without the gauge.
func (s *Service) Close() error { return s.obs.gauges.Close() }

// Migrate creates the campaign table if missing.
func (s *Service) Migrate(ctx context.Context) error {
	id := sqlutil.BinaryKey(s.db, 64)
	ddl := `CREATE TABLE IF NOT EXISTS seckill_campaigns (
		id ` + id + ` NOT NULL PRIMARY KEY, sku ` + id + ` NOT NULL UNIQUE, price BIGINT NOT NULL, stock BIGINT NOT NULL,
		per_user BIGINT NOT NULL, buckets INT NOT NULL, starts_at BIGINT NOT NULL, ends_at BIGINT NOT NULL)`
	if _, err := s.db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("seckill: migrate: %w", err)
	}
	return nil
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// Create records a campaign, creates its SKU in the order block with
// c.Stock units at c.Price, loads it into Redis (Reconcile with repair),
// split over c.Buckets keys, and returns it open. A campaign sells a SKU of
// its own, so that the SKU's stock is the campaign's: a SKU that exists
// already (the shop's, or another campaign's) is ErrInvalid, and the refused
// campaign is not recorded. Creating it again with the same rules finishes a
// Create that failed half-way; with other rules it is ErrInvalid.
func (s *Service) Create(ctx context.Context, c Campaign) (*Sale, error) {
	switch {
	case !idPattern.MatchString(c.ID) || !idPattern.MatchString(c.SKU):
		return nil, fmt.Errorf("%w: campaign and SKU ids are 1..64 of A-Z a-z 0-9 _ . : -", ErrInvalid)
	case c.Stock < 1 || c.Limit < 1 || c.Buckets < 1 || c.Buckets > 1024 || int64(c.Buckets) > c.Stock:
		return nil, fmt.Errorf("%w: stock %d, limit %d, buckets %d (1..min(1024, stock))", ErrInvalid, c.Stock, c.Limit, c.Buckets)
	case c.Price < 1:
		return nil, fmt.Errorf("%w: price %d", ErrInvalid, c.Price)
	case !c.Ends.After(c.Starts):
		return nil, fmt.Errorf("%w: ends %v not after starts %v", ErrInvalid, c.Ends, c.Starts)
	}
	c.Starts, c.Ends = time.UnixMilli(c.Starts.UnixMilli()), time.UnixMilli(c.Ends.UnixMilli())
	err := sqlutil.Retry(ctx, 10, func() error {
		_, err := s.db.ExecContext(ctx, `INSERT INTO seckill_campaigns (id, sku, price, stock, per_user, buckets, starts_at, ends_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			c.ID, c.SKU, c.Price, c.Stock, c.Limit, c.Buckets, c.Starts.UnixMilli(), c.Ends.UnixMilli())
		return err
	})
	inserted := err == nil
	if sqlutil.IsDuplicate(err) { // this campaign, created before — or another on this SKU
		had, err := s.readCampaign(ctx, c.ID)
		switch {
		case errors.Is(err, ErrNoCampaign):
			return nil, fmt.Errorf("%w: SKU %s belongs to another campaign", ErrInvalid, c.SKU)
		case err != nil:
			return nil, err
		case had != c:
			return nil, fmt.Errorf("%w: campaign %s exists with other rules", ErrInvalid, c.ID)
		}
	} else if err != nil {
		return nil, fmt.Errorf("seckill: create campaign: %w", err)
	}
	created, err := s.orders.CreateSKU(ctx, c.SKU, c.Price, c.Stock)
	if err == nil && !created && inserted {
		err = fmt.Errorf("%w: SKU %s exists already: a campaign sells a SKU of its own", ErrInvalid, c.SKU)
	}
	if err != nil {
		if inserted { // refused: leave nothing behind (a crash here leaves a row Create again finishes or refuses)
			s.db.ExecContext(context.WithoutCancel(ctx), `DELETE FROM seckill_campaigns WHERE id = ?`, c.ID)
		}
		return nil, fmt.Errorf("seckill: campaign %s: %w", c.ID, err)
	}
	sl, err := s.Open(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	_, err = sl.reconcile(ctx, true) // its first build, not an operator's Reconcile
	return sl, err
}

// Open returns campaign id as a Sale, its rules read from SQL once and then
// cached (a campaign's rules never change).
func (s *Service) Open(ctx context.Context, id string) (*Sale, error) {
	s.mu.Lock()
	sl := s.sales[id]
	s.mu.Unlock()
	if sl != nil {
		return sl, nil
	}
	c, err := s.readCampaign(ctx, id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl = s.sales[id]; sl == nil {
		sl = &Sale{s: s, c: c, attrs: campaignAttrs(c.ID)}
		s.sales[id] = sl
	}
	return sl, nil
}

func (s *Service) readCampaign(ctx context.Context, id string) (Campaign, error) {
	var row struct {
		Campaign
		StartsAt int64 `db:"starts_at"`
		EndsAt   int64 `db:"ends_at"`
	}
	err := s.db.GetContext(ctx, &row, `SELECT id, sku, price, stock, per_user, buckets, starts_at, ends_at FROM seckill_campaigns WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return Campaign{}, fmt.Errorf("%w: %s", ErrNoCampaign, id)
	}
	if err != nil {
		return Campaign{}, fmt.Errorf("seckill: read campaign: %w", err)
	}
	c := row.Campaign
	c.Starts, c.Ends = time.UnixMilli(row.StartsAt), time.UnixMilli(row.EndsAt)
	return c, nil
}

// key is a key of one bucket: "{<campaign>:<bucket>}:<part>…".
func (sl *Sale) key(bucket int, parts ...string) string {
	return sl.s.space.Key(sl.c.ID+":"+strconv.Itoa(bucket), parts...)
}

// recent is the bucket's hash of what calls made in this retry window need
// to recognise themselves if sent again: one hash per window, expiring after
// two, so memory stays bounded however long a sale runs. A call sent again
// carries the same key, being the same command.
func (sl *Sale) recent(bucket int) string {
	w := sl.s.cfg.RetryWindow.Milliseconds()
	return sl.key(bucket, "recent", strconv.FormatInt(sl.s.cfg.Now().UnixMilli()/w, 10))
}

// recentTTL is how long (ms) a recent hash lives after its last write.
func (sl *Sale) recentTTL() int64 { return 2 * sl.s.cfg.RetryWindow.Milliseconds() }

// bucketKeys are the keys of one bucket, in the order the scripts take them.
func (sl *Sale) bucketKeys(b int, parts ...string) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = sl.key(b, p)
	}
	return out
}

// Outboxes lists the outbox streams of the campaign, for the relay.
func (sl *Sale) Outboxes() []string {
	out := make([]string, sl.c.Buckets)
	for b := range out {
		out[b] = sl.key(b, "outbox")
	}
	return out
}

// RedisStock is the stock left in Redis over all buckets.
func (sl *Sale) RedisStock(ctx context.Context) (int64, error) {
	stocks, err := sl.bucketStocks(ctx)
	var n int64
	for _, v := range stocks {
		n += max(v, 0)
	}
	return n, err
}

// stockLost stands for the stock of a bucket whose state Redis lost.
const stockLost = -1

// bucketStocks reads every bucket's stock in one pipeline.
func (sl *Sale) bucketStocks(ctx context.Context) ([]int64, error) {
	pipe := sl.s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, sl.c.Buckets)
	for b := range cmds {
		cmds[b] = pipe.Get(ctx, sl.key(b, "stock"))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("seckill: read stock of %s: %w", sl.c.ID, err)
	}
	out := make([]int64, sl.c.Buckets)
	for b, cmd := range cmds {
		n, err := cmd.Int64()
		if errors.Is(err, redis.Nil) {
			n = stockLost
		}
		out[b] = n
	}
	return out, nil
}
