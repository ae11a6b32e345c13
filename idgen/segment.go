package idgen

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Source leases ranges of ids for a business tag. Every id of every lease of
// one tag is handed out once, across all processes sharing the source.
type Source interface {
	// Lease reserves step ids for tag and returns the last one: the lease is
	// [last-step+1, last]. Ids start at 1.
	Lease(ctx context.Context, tag string, step int64) (last int64, err error)
}

// SegmentConfig configures a Segment.
type SegmentConfig struct {
	// Tag names the counter ("order", "shortlink"); each tag counts alone.
	Tag string
	// Step is how many ids the first lease holds, and the smallest step.
	// Default 10,000.
	Step int64
	// MaxStep bounds the step, which adapts as in Meituan's Leaf: a lease
	// used up in less than LeaseTarget makes the next one twice as large, one
	// that lasted over twice LeaseTarget half as large, so a lease lasts about
	// LeaseTarget whatever the demand and the background prefetch always has
	// time to finish. A crash loses at most two leases' unused ids. Default
	// 1,000,000; set it to Step for a fixed step.
	MaxStep int64
	// LeaseTarget is how long a lease should last. Default 15 minutes.
	LeaseTarget time.Duration
	// Now is the clock the step adapts by. Default time.Now.
	Now func() time.Time
	// PrefetchAt is the used share of a lease at which the next lease is
	// fetched in the background. Default 0.1, as in Meituan's Leaf.
	PrefetchAt float64
	// FetchTimeout bounds a background fetch. Default 5s.
	FetchTimeout time.Duration
	// MeterProvider and TracerProvider receive the fetches' metrics and
	// spans and the remaining-ids gauge (doc.go, Observability); nil means
	// the global ones. Next served from memory records nothing.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Segment hands out increasing ids from leased ranges ("号段"), double
// buffered: while one lease is being used the next is fetched in the
// background, so in the steady state Next does one atomic add and no I/O.
// It is safe for concurrent use. Ids are unique but not gap-free: the unused
// rest of a lease is lost when the process stops or the Segment is closed.
type Segment struct {
	src Source
	cfg SegmentConfig

	cur    atomic.Pointer[lease]
	closed atomic.Bool // set under mu

	step      atomic.Int64 // the next lease's size
	lastFetch atomic.Int64 // when the current lease was fetched (Unix ns)

	mu          sync.Mutex
	next        *lease             // prefetched, waiting
	fetching    chan struct{}      // closed when the fetch in flight ends; nil if none
	cancelFetch context.CancelFunc // cancels the fetch in flight

	obs *segmentInstruments
}

type lease struct {
	next       atomic.Int64 // next id to hand out
	end        int64        // one past the last id
	prefetchAt int64        // handing out this id triggers the prefetch
}

var (
	// ErrSegmentConfig is wrapped by configuration errors.
	ErrSegmentConfig = errors.New("idgen: bad segment config")
	// ErrClosed is returned by Next after Close (of a Segment or Snowflake).
	ErrClosed = errors.New("idgen: closed")
)

// NewSegment returns an allocator for cfg.Tag on src. It leases the first
// range before returning.
func NewSegment(ctx context.Context, src Source, cfg SegmentConfig) (*Segment, error) {
	if cfg.Step == 0 {
		cfg.Step = 10000
	}
	if cfg.MaxStep == 0 {
		cfg.MaxStep = max(cfg.Step, 1_000_000)
	}
	if cfg.LeaseTarget == 0 {
		cfg.LeaseTarget = 15 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.PrefetchAt == 0 {
		cfg.PrefetchAt = 0.1
	}
	if cfg.FetchTimeout == 0 {
		cfg.FetchTimeout = 5 * time.Second
	}
	switch {
	case src == nil:
		return nil, fmt.Errorf("%w: nil source", ErrSegmentConfig)
	case cfg.Tag == "":
		return nil, fmt.Errorf("%w: empty tag", ErrSegmentConfig)
	case cfg.Step < 1 || cfg.MaxStep < cfg.Step:
		return nil, fmt.Errorf("%w: step %d, max step %d (1 ≤ step ≤ max)", ErrSegmentConfig, cfg.Step, cfg.MaxStep)
	case cfg.LeaseTarget < 0:
		return nil, fmt.Errorf("%w: negative lease target", ErrSegmentConfig)
	case cfg.PrefetchAt <= 0 || cfg.PrefetchAt >= 1:
		return nil, fmt.Errorf("%w: prefetch share %v outside (0, 1)", ErrSegmentConfig, cfg.PrefetchAt)
	}
	s := &Segment{src: src, cfg: cfg}
	s.step.Store(cfg.Step)
	s.obs = newSegmentInstruments(s)
	l, err := s.fetch(ctx)
	if err != nil {
		s.obs.gauges.Close()
		return nil, err
	}
	s.cur.Store(l)
	return s, nil
}

// Next returns the next id, or ErrClosed after Close.
func (s *Segment) Next(ctx context.Context) (int64, error) {
	for {
		if s.closed.Load() {
			return 0, ErrClosed
		}
		l := s.cur.Load()
		id := l.next.Add(1) - 1
		if id < l.end {
			if id == l.prefetchAt {
				s.prefetch()
			}
			return id, nil
		}
		if err := s.advance(ctx, l); err != nil {
			return 0, err
		}
	}
}

// prefetch starts fetching the next lease unless one is fetched or waiting.
func (s *Segment) prefetch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() || s.next != nil || s.fetching != nil {
		return
	}
	done := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.FetchTimeout)
	s.fetching, s.cancelFetch = done, cancel
	go func() {
		defer cancel()
		l, _ := s.fetch(ctx) // on failure advance fetches again and reports it
		s.mu.Lock()
		s.next, s.fetching, s.cancelFetch = l, nil, nil
		s.mu.Unlock()
		close(done)
	}()
}

// Close stops the allocator: it cancels a background fetch in flight and
// waits for it to end, and Next returns ErrClosed from then on. The unused
// ids of the current and the prefetched lease are lost, as when the process
// stops. Close is safe to call more than once and concurrently with Next;
// it returns nil (a Segment is an io.Closer).
func (s *Segment) Close() error {
	s.mu.Lock()
	s.closed.Store(true)
	wait, cancel := s.fetching, s.cancelFetch
	s.mu.Unlock()
	if wait != nil {
		cancel()
		<-wait
	}
	s.obs.gauges.Close()
	return nil
}

// advance replaces the used-up lease old with the next one: the prefetched
// lease, the one being fetched, or — when the prefetch failed — a fresh one.
func (s *Segment) advance(ctx context.Context, old *lease) error {
	for {
		s.mu.Lock()
		if s.closed.Load() {
			s.mu.Unlock()
			return ErrClosed
		}
		if s.cur.Load() != old { // another caller already advanced
			s.mu.Unlock()
			return nil
		}
		if s.next != nil {
			s.cur.Store(s.next)
			s.next = nil
			s.mu.Unlock()
			return nil
		}
		if wait := s.fetching; wait != nil {
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// No lease on the way (the prefetch failed, or Step is so small it
		// never fired): fetch now, holding the lock so only one caller does.
		l, err := s.fetch(ctx)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		s.cur.Store(l)
		s.mu.Unlock()
		return nil
	}
}

// fetch leases the next range: the I/O the metrics count.
func (s *Segment) fetch(ctx context.Context) (_ *lease, err error) {
	ctx, call := s.obs.fetch.Start(ctx)
	defer func() { err = call.End(err) }()
	step := s.nextStep(s.cfg.Now())
	last, err := s.src.Lease(ctx, s.cfg.Tag, step)
	if err != nil {
		return nil, fmt.Errorf("idgen: lease %q: %w", s.cfg.Tag, err)
	}
	s.lastFetch.Store(s.cfg.Now().UnixNano())
	l := &lease{end: last + 1}
	first := last - step + 1
	l.next.Store(first)
	l.prefetchAt = first + int64(float64(step)*s.cfg.PrefetchAt)
	return l, nil
}

// nextStep sizes the next lease from how long the current one lasted.
func (s *Segment) nextStep(now time.Time) int64 {
	step := s.step.Load()
	if prev := s.lastFetch.Load(); prev != 0 {
		switch lasted := now.Sub(time.Unix(0, prev)); {
		case lasted < s.cfg.LeaseTarget:
			step = min(2*step, s.cfg.MaxStep)
		case lasted > 2*s.cfg.LeaseTarget:
			step = max(step/2, s.cfg.Step)
		}
		s.step.Store(step)
	}
	return step
}

// remaining is how many ids the Segment hands out before it must fetch:
// the rest of the current lease and the prefetched one (false once closed).
func (s *Segment) remaining() (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return 0, false
	}
	n := s.cur.Load().left()
	if s.next != nil {
		n += s.next.left()
	}
	return n, true
}

// left is how many ids the lease has not handed out.
func (l *lease) left() int64 {
	if l == nil {
		return 0
	}
	return max(0, l.end-l.next.Load())
}

// Step returns the size the next lease will have (before it adapts to how
// long the current one lasts).
func (s *Segment) Step() int64 { return s.step.Load() }
