package idgen

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bwmarrin/snowflake"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Snowflake layout (bwmarrin's defaults, never changed here): 41 bits of
// milliseconds since the Twitter epoch (2010-11-04, good until 2080), 10 bits
// of node id, 12 bits of sequence — 4096 ids per millisecond per node.
const (
	MaxNodeID       = 1023
	snowflakeEpoch  = 1288834974657 // ms, bwmarrin.Epoch
	snowflakeTShift = 22
)

var (
	// ErrNodeID is returned for a node id outside 0..1023.
	ErrNodeID = errors.New("idgen: snowflake node id out of range 0..1023")
	// ErrClockBackwards is returned when the wall clock is behind the time
	// this node had already reserved by more than SnowflakeConfig.MaxClockWait:
	// issuing ids now could repeat ids issued before the restart.
	ErrClockBackwards = errors.New("idgen: clock is behind this node's last reserved time")
)

// Checkpoint durably records how far into the future a snowflake node has
// reserved the right to issue ids, so that a restarted node whose clock went
// back does not issue them again.
type Checkpoint interface {
	// Load returns the stored reservation, or the zero time if none.
	Load(ctx context.Context) (time.Time, error)
	// Save stores t. It must not lower a stored later time.
	Save(ctx context.Context, t time.Time) error
}

// SnowflakeConfig configures a Snowflake.
type SnowflakeConfig struct {
	// NodeID identifies this process among all live generators: 0..1023,
	// assigned by configuration (not derived from an IP address, where
	// collisions are common). Required to be unique; nothing here checks it:
	// use Node instead to have it leased and checked.
	NodeID int64
	// Node, when set, supplies the node id from a lease (NodeID must then be
	// zero or the lease's id), and Next fails with ErrLeaseLost from the
	// moment the lease is no longer valid, so that an id lost to another
	// process is never used by two at once. The Snowflake does not close
	// it.
	Node *NodeLease
	// Checkpoint, when set, makes ids unique across restarts even if the
	// clock went back: the node reserves Lease of time ahead in it before
	// issuing ids from that time. Nil means the caller vouches for the clock.
	Checkpoint Checkpoint
	// Lease is how far ahead each reservation reaches. A restart waits for
	// at most the unexpired part of it. Default 1s.
	Lease time.Duration
	// MaxClockWait is the longest New waits for the clock to pass the
	// stored reservation; beyond it New fails with ErrClockBackwards.
	// Default 2 × Lease.
	MaxClockWait time.Duration
	// Now is the wall clock, for tests. Default time.Now.
	Now func() time.Time
	// MeterProvider and TracerProvider receive the checkpoint reads' and
	// writes' metrics and spans (doc.go, Observability); nil means the
	// global ones. Next records nothing unless it writes the checkpoint.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Snowflake issues 63-bit ids that grow with time, through bwmarrin/snowflake.
// It is safe for concurrent use.
//
// Within one process ids never repeat even if the wall clock steps back:
// bwmarrin measures time on the monotonic clock from the moment the node was
// created. Across restarts that guarantee comes from the Checkpoint.
type Snowflake struct {
	node *snowflake.Node
	cfg  SnowflakeConfig
	// reservedMs is the end of the saved reservation in snowflake
	// milliseconds; renewAtMs is when to extend it (half-way).
	reservedMs atomic.Int64
	renewAtMs  atomic.Int64
	renewMu    sync.Mutex
	renewing   atomic.Bool

	closed      atomic.Bool // set under bgMu
	bgMu        sync.Mutex
	bg          sync.WaitGroup     // the background renewal
	cancelRenew context.CancelFunc // cancels it; nil if none runs

	obs *snowflakeInstruments
}

// newNodeMu serialises snowflake.NewNode, which writes package-level
// variables of bwmarrin/snowflake.
var newNodeMu sync.Mutex

// NewSnowflake returns a generator for cfg.NodeID. With a Checkpoint it
// loads the previous reservation, waits for the clock to pass it (up to
// MaxClockWait) and saves a new one.
func NewSnowflake(ctx context.Context, cfg SnowflakeConfig) (*Snowflake, error) {
	if cfg.Node != nil {
		if cfg.NodeID != 0 && cfg.NodeID != cfg.Node.ID() {
			return nil, fmt.Errorf("%w: NodeID %d and leased node %d", ErrNodeID, cfg.NodeID, cfg.Node.ID())
		}
		if !cfg.Node.Valid() {
			return nil, fmt.Errorf("%w: node %d", ErrLeaseLost, cfg.Node.ID())
		}
		cfg.NodeID = cfg.Node.ID()
	}
	if cfg.NodeID < 0 || cfg.NodeID > MaxNodeID {
		return nil, fmt.Errorf("%w: %d", ErrNodeID, cfg.NodeID)
	}
	if cfg.Lease == 0 {
		cfg.Lease = time.Second
	}
	if cfg.MaxClockWait == 0 {
		cfg.MaxClockWait = 2 * cfg.Lease
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Lease < 10*time.Millisecond || cfg.MaxClockWait < 0 {
		return nil, fmt.Errorf("idgen: snowflake lease %v must be ≥ 10ms and max clock wait ≥ 0", cfg.Lease)
	}
	s := &Snowflake{cfg: cfg, obs: newSnowflakeInstruments(cfg.MeterProvider, cfg.TracerProvider)}
	if cfg.Checkpoint != nil {
		if err := s.waitForReservation(ctx); err != nil {
			return nil, err
		}
	}
	newNodeMu.Lock()
	node, err := snowflake.NewNode(cfg.NodeID)
	newNodeMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("idgen: snowflake node: %w", err)
	}
	s.node = node
	if cfg.Checkpoint == nil {
		s.renewAtMs.Store(1<<62 - 1) // never
		return s, nil
	}
	if err := s.reserve(ctx, cfg.Now().UnixMilli()-snowflakeEpoch); err != nil {
		return nil, err
	}
	return s, nil
}

// waitForReservation reads the checkpoint and waits for the clock to pass
// it: the checkpoint_load operation.
func (s *Snowflake) waitForReservation(ctx context.Context) (err error) {
	ctx, call := s.obs.load.Start(ctx)
	defer func() { err = call.End(err) }()
	prev, err := s.cfg.Checkpoint.Load(ctx)
	if err != nil {
		return fmt.Errorf("idgen: load snowflake checkpoint: %w", err)
	}
	behind := prev.Sub(s.cfg.Now())
	if behind <= 0 {
		return nil
	}
	if behind > s.cfg.MaxClockWait {
		return fmt.Errorf("%w: %v behind %s (max wait %v)", ErrClockBackwards, behind, prev.UTC().Format(time.RFC3339Nano), s.cfg.MaxClockWait)
	}
	select {
	case <-time.After(behind + time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reserve saves the reservation for ids up to Lease after atMs (snowflake
// milliseconds, the node's own clock) and moves the renewal point half-way.
func (s *Snowflake) reserve(ctx context.Context, atMs int64) (err error) {
	ctx, call := s.obs.save.Start(ctx)
	defer func() { err = call.End(err) }()
	lease := s.cfg.Lease.Milliseconds()
	until := time.UnixMilli(atMs + lease + snowflakeEpoch)
	if err := s.cfg.Checkpoint.Save(ctx, until); err != nil {
		return fmt.Errorf("idgen: save snowflake checkpoint: %w", err)
	}
	s.reservedMs.Store(atMs + lease)
	s.renewAtMs.Store(atMs + lease/2)
	return nil
}

// Next returns a new id, or ErrClosed after Close, or ErrLeaseLost once
// the Node lease is no longer valid (checked after the id is made, so no id
// leaves that was made after the lease ended). Without a Checkpoint it
// never fails otherwise. With one, it extends the reservation in the
// background half-way through a lease and waits for it only when ids would
// outrun it (the checkpoint store is slower than Lease/2).
func (s *Snowflake) Next(ctx context.Context) (int64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	id := s.node.Generate().Int64()
	if s.cfg.Node != nil && !s.cfg.Node.Valid() {
		return 0, fmt.Errorf("%w: node %d", ErrLeaseLost, s.cfg.NodeID)
	}
	ms := id >> snowflakeTShift
	if ms < s.renewAtMs.Load() {
		return id, nil
	}
	if ms < s.reservedMs.Load() {
		s.renewInBackground(ms)
		return id, nil
	}
	// Past the reservation: this id may only leave once a lease covers it.
	s.renewMu.Lock()
	defer s.renewMu.Unlock()
	if ms >= s.reservedMs.Load() {
		if err := s.reserve(ctx, ms); err != nil {
			return 0, err
		}
	}
	return id, nil
}

func (s *Snowflake) renewInBackground(atMs int64) {
	if !s.renewing.CompareAndSwap(false, true) {
		return
	}
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.closed.Load() {
		s.renewing.Store(false)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Lease)
	s.cancelRenew = cancel
	s.bg.Go(func() {
		defer s.renewing.Store(false)
		defer cancel()
		s.renewMu.Lock()
		defer s.renewMu.Unlock()
		if atMs < s.renewAtMs.Load() {
			return // renewed meanwhile
		}
		s.reserve(ctx, atMs) // on failure Next renews synchronously before the lease ends
	})
}

// Close cancels a background renewal of the checkpoint and waits for it to
// end; Next returns ErrClosed from then on. It is safe to call more than
// once and concurrently with Next; it returns nil (a Snowflake is an
// io.Closer).
func (s *Snowflake) Close() error {
	s.bgMu.Lock()
	s.closed.Store(true)
	if s.cancelRenew != nil {
		s.cancelRenew()
	}
	s.bgMu.Unlock()
	s.bg.Wait()
	return nil
}

// SnowflakeTime returns the time an id was issued at, to the millisecond.
func SnowflakeTime(id int64) time.Time {
	return time.UnixMilli(id>>snowflakeTShift + snowflakeEpoch)
}

// SnowflakeNode returns the node id that issued id.
func SnowflakeNode(id int64) int64 { return id >> 12 & MaxNodeID }
