package idgen

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
)

var (
	// ErrLeaseConfig is wrapped by node lease configuration errors.
	ErrLeaseConfig = errors.New("idgen: bad node lease config")
	// ErrNoFreeNode is returned by LeaseNode when every node id of the pool
	// is held, or ended less than Margin ago.
	ErrNoFreeNode = errors.New("idgen: no free node id in the pool")
	// ErrLeaseLost is returned once a node lease is no longer valid: it
	// could not be renewed before its TTL ran out, the store says another
	// holder has it, or it was closed. A Snowflake on it stops issuing ids.
	ErrLeaseLost = errors.New("idgen: node lease lost")
)

// NodeStore keeps pools of snowflake node ids and who leases each. Every
// decision about expiry is taken on the store's own clock (Redis TIME, the
// SQL server's clock), so the clocks of the holders never decide who gets
// an id. RedisNodeStore and SQLNodeStore implement it.
type NodeStore interface {
	// Grant leases to holder, for ttl, one id of pool in [first, last]
	// that was never granted or whose last lease ended (expired or was
	// released) at least margin ago. The token it returns is larger than
	// every earlier grant's of that id. A Grant run again for the same
	// holder while its lease lives returns that lease (a retry after a lost
	// reply takes no second id). It returns ErrNoFreeNode when no id is free.
	Grant(ctx context.Context, pool string, first, last int64, holder string, ttl, margin time.Duration) (NodeGrant, error)
	// Renew extends the lease to ttl from the store's now. It returns
	// ErrLeaseLost when holder no longer holds id with token: the lease
	// expired, was released or was granted again.
	Renew(ctx context.Context, pool string, g NodeGrant, holder string, ttl time.Duration) error
	// Release ends the lease now: the id is free margin later. Releasing a
	// lease that is not held does nothing.
	Release(ctx context.Context, pool string, g NodeGrant, holder string) error
}

// NodeGrant is one grant of a node id.
type NodeGrant struct {
	ID int64 `json:"id"`
	// Token is the fencing token: it grows with every grant of ID, so of two
	// holders the later one has the larger token.
	Token int64 `json:"token"`
}

// NodeLeaseConfig configures LeaseNode. Durations are rounded down to
// milliseconds.
type NodeLeaseConfig struct {
	// Pool names the set of ids (one per fleet of generators that must not
	// collide). Default "snowflake". 1..64 characters of [A-Za-z0-9_.-].
	Pool string
	// First and Count bound the ids handed out: [First, First+Count).
	// Default First 0 and Count up to MaxNodeID (0..1023). Split the range
	// between fleets that share the id space but not the store.
	First, Count int64
	// TTL is how long a lease lives without renewal. A holder that cannot
	// reach the store stops issuing ids at 95% of TTL (measured on its own
	// monotonic clock from before the last successful renewal was sent),
	// before the store's lease expires; so TTL is also about the outage a
	// holder rides out. Default 10s; at least 50ms.
	TTL time.Duration
	// RenewEvery is how often the lease is renewed in the background; a
	// failed renewal is tried again every RenewEvery/4 until TTL runs out.
	// Default TTL/3; it must be below TTL.
	RenewEvery time.Duration
	// Margin is how long an id stays unused after its lease ended (expired
	// or released) before the store grants it again. It must exceed the
	// clock skew you allow: between any two holders' wall clocks (the
	// snowflake timestamps ids with it, so a next holder whose clock is
	// behind could repeat the last holder's last milliseconds) plus any
	// jump of the store's clock. Default 5s.
	Margin time.Duration
	// Now is the holder's clock, for tests. It must carry a monotonic
	// reading (time.Now's does): the holder's deadline is measured on it.
	// Default time.Now.
	Now func() time.Time
	// MeterProvider and TracerProvider receive the grant's, renewals' and
	// release's metrics and spans and the leases lost (doc.go,
	// Observability); nil means the global ones.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Logger, when set, hears of the background renewal: a renewal that
	// failed (Warn, with the time the lease has left), the first that
	// succeeds after failures (Info), the lease lost — revoked by the
	// store or expired with every renewal failing (Error: the generator
	// stops issuing ids). Nil: silent.
	Logger *slog.Logger
}

// NodeLease is a node id leased from a NodeStore, renewed in the background
// until Close. It is safe for concurrent use.
type NodeLease struct {
	store  NodeStore
	cfg    NodeLeaseConfig
	grant  NodeGrant
	holder string

	base     time.Time    // the clock's reading at the start, with its monotonic part
	deadline atomic.Int64 // valid until base + deadline (ns)
	lost     atomic.Bool
	log      *slog.Logger
	done     chan struct{} // closed when the lease is lost or closed
	doneOnce sync.Once

	stop      context.CancelFunc
	renewer   sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	obs *nodeInstruments
}

// A holder's lease ends TTL/earlyShare before the store's would, counted
// from before the request was sent: that absorbs the store's clock reading
// (Redis samples it once per command, to the millisecond), and a holder
// clock running up to 5% slower than the store's.
const earlyShare = 20

var poolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// LeaseNode leases a node id from store and renews it in the background
// until Close. It returns ErrNoFreeNode when the pool has no free id, and
// an error wrapping ErrLeaseConfig (having asked the store nothing) for bad
// configuration.
func LeaseNode(ctx context.Context, store NodeStore, cfg NodeLeaseConfig) (*NodeLease, error) {
	cfg.Pool = cmp.Or(cfg.Pool, "snowflake")
	cfg.Count = cmp.Or(cfg.Count, MaxNodeID+1-cfg.First)
	cfg.TTL = cmp.Or(cfg.TTL, 10*time.Second).Truncate(time.Millisecond)
	cfg.RenewEvery = cmp.Or(cfg.RenewEvery, cfg.TTL/3)
	cfg.Margin = cmp.Or(cfg.Margin, 5*time.Second).Truncate(time.Millisecond)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case store == nil:
		return nil, fmt.Errorf("%w: nil store", ErrLeaseConfig)
	case !poolName.MatchString(cfg.Pool):
		return nil, fmt.Errorf("%w: pool %q (1..64 of A-Za-z0-9_.-)", ErrLeaseConfig, cfg.Pool)
	case cfg.First < 0 || cfg.Count < 1 || cfg.First+cfg.Count-1 > MaxNodeID:
		return nil, fmt.Errorf("%w: ids [%d, %d) outside 0..%d", ErrLeaseConfig, cfg.First, cfg.First+cfg.Count, MaxNodeID)
	case cfg.TTL < 50*time.Millisecond:
		return nil, fmt.Errorf("%w: ttl %v < 50ms", ErrLeaseConfig, cfg.TTL)
	case cfg.RenewEvery <= 0 || cfg.RenewEvery >= cfg.TTL:
		return nil, fmt.Errorf("%w: renew every %v outside (0, ttl %v)", ErrLeaseConfig, cfg.RenewEvery, cfg.TTL)
	case cfg.Margin < 0:
		return nil, fmt.Errorf("%w: negative margin", ErrLeaseConfig)
	}
	l := &NodeLease{store: store, cfg: cfg, holder: newHolder(), done: make(chan struct{}),
		obs: newNodeInstruments(cfg.MeterProvider, cfg.TracerProvider), log: obs.Logger(cfg.Logger, "idgen")}
	l.base = cfg.Now()
	g, err := l.grantOne(ctx)
	if err != nil {
		return nil, err
	}
	l.grant = g
	l.deadline.Store(int64(cfg.TTL - cfg.TTL/earlyShare)) // from before the grant was sent: before the store's expiry
	renewCtx, stop := context.WithCancel(context.Background())
	l.stop = stop
	l.renewer.Go(func() { l.renew(renewCtx) })
	return l, nil
}

// grantOne asks the store for a node id: the node_grant operation.
func (l *NodeLease) grantOne(ctx context.Context) (_ NodeGrant, err error) {
	ctx, call := l.obs.grant.Start(ctx)
	defer func() { err = call.End(err) }()
	g, err := l.store.Grant(ctx, l.cfg.Pool, l.cfg.First, l.cfg.First+l.cfg.Count-1, l.holder, l.cfg.TTL, l.cfg.Margin)
	if err != nil && !errors.Is(err, ErrNoFreeNode) {
		err = fmt.Errorf("idgen: lease node id: %w", err)
	}
	return g, err
}

func newHolder() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ID returns the leased node id.
func (l *NodeLease) ID() int64 { return l.grant.ID }

// Token returns the lease's fencing token (see NodeGrant).
func (l *NodeLease) Token() int64 { return l.grant.Token }

// Valid reports whether the lease still holds: not lost, not closed, and
// its deadline not yet reached on the holder's clock.
func (l *NodeLease) Valid() bool {
	return !l.lost.Load() && l.cfg.Now().Sub(l.base) < time.Duration(l.deadline.Load())
}

// Deadline returns the instant (on Config.Now's clock) until which the
// lease is valid unless renewed; the store's expiry is never earlier.
func (l *NodeLease) Deadline() time.Time { return l.base.Add(time.Duration(l.deadline.Load())) }

// Done is closed when the lease is lost or closed.
func (l *NodeLease) Done() <-chan struct{} { return l.done }

func (l *NodeLease) end() {
	l.lost.Store(true)
	l.doneOnce.Do(func() { close(l.done) })
}

// renew extends the lease every RenewEvery until ctx ends, the store says
// the lease is gone, or the deadline passes with every attempt failing.
func (l *NodeLease) renew(ctx context.Context) {
	t := time.NewTimer(l.cfg.RenewEvery)
	defer t.Stop()
	failed := 0 // renewals failed in a row
	attrs := func(more ...any) []any {
		return append([]any{"pool", l.cfg.Pool, "node", l.grant.ID, "token", l.grant.Token}, more...)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := l.cfg.Now().Sub(l.base)
		left := time.Duration(l.deadline.Load()) - sent
		if left <= 0 {
			l.obs.lost(l.obs.expired)
			l.log.Error("idgen: node lease expired: every renewal failed; no more ids from it", attrs("failed_renewals", failed)...)
			l.end()
			return
		}
		err := l.renewOnce(ctx, left)
		switch {
		case err == nil:
			l.deadline.Store(int64(sent + l.cfg.TTL - l.cfg.TTL/earlyShare))
			t.Reset(l.cfg.RenewEvery)
			if failed > 0 {
				l.log.Info("idgen: node lease renewed after failures", attrs("failed_renewals", failed)...)
				failed = 0
			}
		case errors.Is(err, ErrLeaseLost):
			l.obs.lost(l.obs.revoked)
			l.log.Error("idgen: node lease revoked by the store; no more ids from it", attrs("err", err)...)
			l.end()
			return
		case ctx.Err() != nil: // closed meanwhile
			return
		default: // the store is unreachable or slow: try again while the lease lasts
			failed++
			l.log.Warn("idgen: node lease renewal failed; retrying while the lease lasts",
				attrs("failed_renewals", failed, "lease_left", left.Round(time.Millisecond), "retry_in", l.cfg.RenewEvery/4, "err", err)...)
			t.Reset(l.cfg.RenewEvery / 4)
		}
	}
}

// renewOnce asks the store to extend the lease, within left: the
// node_renew operation.
func (l *NodeLease) renewOnce(ctx context.Context, left time.Duration) (err error) {
	ctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	ctx, call := l.obs.renew.Start(ctx)
	defer func() { err = call.End(err) }()
	return l.store.Renew(ctx, l.cfg.Pool, l.grant, l.holder, l.cfg.TTL)
}

// Close stops the renewal, waits for it to end and releases the lease (the
// id is granted again Margin later). The lease is invalid from the moment
// Close is called. It is safe to call more than once; later calls return
// nil. A release that fails leaves the id to expire.
func (l *NodeLease) Close() error {
	l.closeOnce.Do(func() {
		l.end()
		l.stop()
		l.renewer.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.TTL)
		defer cancel()
		ctx, call := l.obs.release.Start(ctx)
		if err := call.End(l.store.Release(ctx, l.cfg.Pool, l.grant, l.holder)); err != nil {
			l.closeErr = fmt.Errorf("idgen: release node %d: %w", l.grant.ID, err)
		}
	})
	return l.closeErr
}
