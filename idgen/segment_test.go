package idgen_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func sqlSource(t *testing.T) idgen.Source {
	t.Helper()
	src, err := idgen.NewSQLSource(testenv.NewSQL(t), "id_segments")
	if err != nil {
		t.Fatal(err)
	}
	if err := src.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return src
}

func sources(t *testing.T) map[string]func(t *testing.T) (idgen.Source, string) {
	return map[string]func(t *testing.T) (idgen.Source, string){
		"sql": func(t *testing.T) (idgen.Source, string) { return sqlSource(t), "orders" },
		"redis": func(t *testing.T) (idgen.Source, string) {
			r := testenv.NewRedis(t)
			return idgen.NewRedisSource(r.Client, r.Namespace), "orders"
		},
		"redis-cluster": func(t *testing.T) (idgen.Source, string) {
			r := testenv.NewRedisCluster(t)
			return idgen.NewRedisSource(r.Client, r.Namespace), "orders"
		},
	}
}

// bitset marks ids atomically and reports a second mark.
type bitset []atomic.Uint64

func (b bitset) mark(id int64) (dup bool) {
	bit := uint64(1) << (id % 64)
	return b[id/64].Or(bit)&bit != 0
}

// Three allocators (as three nodes would) × 8 goroutines × 1M ids on one
// source: every id is handed out once.
func TestSegmentNoDuplicateAcrossAllocators(t *testing.T) {
	const allocators, goroutines, perGoroutine, step = 3, 8, 1_000_000, 50_000
	if testing.Short() {
		t.Skip("24M ids")
	}
	for name, open := range sources(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			src, tag := open(t)
			// Every allocator wastes at most its current and prefetched lease.
			maxID := int64(allocators*goroutines*perGoroutine + 3*allocators*step)
			seen := make(bitset, maxID/64+1)
			var wg sync.WaitGroup
			var issued atomic.Int64
			for range allocators {
				seg, err := idgen.NewSegment(ctx, src, idgen.SegmentConfig{Tag: tag, Step: step, MaxStep: step})
				if err != nil {
					t.Fatal(err)
				}
				for range goroutines {
					wg.Go(func() {
						prev := int64(0)
						for range perGoroutine {
							id, err := seg.Next(ctx)
							if err != nil {
								t.Error(err)
								return
							}
							if id <= prev || id < 1 || id > maxID {
								t.Errorf("id %d after %d (max %d)", id, prev, maxID)
								return
							}
							if seen.mark(id) {
								t.Errorf("id %d handed out twice", id)
								return
							}
							prev = id
						}
						issued.Add(perGoroutine)
					})
				}
			}
			wg.Wait()
			if got := issued.Load(); got != allocators*goroutines*perGoroutine {
				t.Fatalf("issued %d ids", got)
			}
		})
	}
}

// slowSource counts leases and can hold them back or fail them.
type slowSource struct {
	idgen.Source
	leases  atomic.Int64
	gate    chan struct{} // when non-nil, each lease waits for a token
	failing atomic.Bool
}

func (s *slowSource) Lease(ctx context.Context, tag string, step int64) (int64, error) {
	if s.gate != nil {
		<-s.gate
	}
	if s.failing.Load() {
		return 0, errors.New("injected source failure")
	}
	s.leases.Add(1)
	return s.Source.Lease(ctx, tag, step)
}

// The next lease is fetched once 10% of the current one is used, so crossing
// into it needs no I/O.
func TestSegmentPrefetchesAtTenPercent(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	src := &slowSource{Source: idgen.NewRedisSource(r.Client, r.Namespace), gate: make(chan struct{}, 10)}
	src.gate <- struct{}{}
	seg, err := idgen.NewSegment(ctx, src, idgen.SegmentConfig{Tag: "t", Step: 100})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if id, _ := seg.Next(ctx); id != int64(i+1) {
			t.Fatalf("id %d, want %d", id, i+1)
		}
	}
	if n := src.leases.Load(); n != 1 {
		t.Fatalf("%d leases before 10%% used, want 1", n)
	}
	seg.Next(ctx)          // the 11th id: 10% used → prefetch starts (blocked at the gate)
	src.gate <- struct{}{} // let it through
	for range 89 {
		seg.Next(ctx)
	}
	// The first lease is used up; the prefetched one must serve without a
	// further lease (the gate is empty: a synchronous fetch would block).
	id, err := seg.Next(ctx)
	if err != nil || id != 101 {
		t.Fatalf("first id of the second lease = %d, %v; want 101", id, err)
	}
	if n := src.leases.Load(); n != 2 {
		t.Fatalf("%d leases, want 2", n)
	}
}

// A failing source surfaces as an error from Next once the buffered ids run
// out, and the allocator recovers when the source does.
func TestSegmentSourceFailure(t *testing.T) {
	ctx := context.Background()
	src := &slowSource{Source: sqlSource(t)}
	seg, err := idgen.NewSegment(ctx, src, idgen.SegmentConfig{Tag: "t", Step: 10})
	if err != nil {
		t.Fatal(err)
	}
	src.failing.Store(true)
	var got []int64
	var lastErr error
	for range 30 {
		id, err := seg.Next(ctx)
		if err != nil {
			lastErr = err
			break
		}
		got = append(got, id)
	}
	if lastErr == nil || len(got) != 10 {
		t.Fatalf("handed out %d ids then err=%v; want the 10 leased ids then an error", len(got), lastErr)
	}
	src.failing.Store(false)
	id, err := seg.Next(ctx)
	if err != nil || id != 11 {
		t.Fatalf("after recovery: %d, %v; want 11", id, err)
	}
}

func TestSegmentConfigErrors(t *testing.T) {
	ctx := context.Background()
	src := sqlSource(t)
	for _, cfg := range []idgen.SegmentConfig{
		{Tag: ""}, {Tag: "t", Step: -1}, {Tag: "t", PrefetchAt: 1.5},
	} {
		if _, err := idgen.NewSegment(ctx, src, cfg); !errors.Is(err, idgen.ErrSegmentConfig) {
			t.Errorf("%+v: %v, want ErrSegmentConfig", cfg, err)
		}
	}
	if _, err := idgen.NewSQLSource(testenv.NewSQL(t), "x; DROP TABLE y"); !errors.Is(err, idgen.ErrSegmentConfig) {
		t.Errorf("hostile table name accepted: %v", err)
	}
}

// Separate tags count separately; ids are dense within one allocator.
func TestSegmentTagsAreIndependent(t *testing.T) {
	ctx := context.Background()
	src := sqlSource(t)
	a, _ := idgen.NewSegment(ctx, src, idgen.SegmentConfig{Tag: "a", Step: 5})
	b, _ := idgen.NewSegment(ctx, src, idgen.SegmentConfig{Tag: "b", Step: 5})
	var got []string
	for range 7 {
		x, _ := a.Next(ctx)
		y, _ := b.Next(ctx)
		got = append(got, fmt.Sprint(x, y))
	}
	if fmt.Sprint(got) != "[1 1 2 2 3 3 4 4 5 5 6 6 7 7]" {
		t.Fatalf("got %v", got)
	}
}

// Short codes drawn from a segment are distinct and decode to their counter.
func TestShortCodesFromSegment(t *testing.T) {
	ctx := context.Background()
	seg, err := idgen.NewSegment(ctx, sqlSource(t), idgen.SegmentConfig{Tag: "links", Step: 1000})
	if err != nil {
		t.Fatal(err)
	}
	codes, _ := idgen.NewShortCodes(seg, idgen.ShortCodeConfig{Key: 12345})
	seen := map[string]bool{}
	for i := range 5000 {
		c, err := codes.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[c] || len(c) != 7 {
			t.Fatalf("code %q duplicate or wrong length", c)
		}
		seen[c] = true
		if n, _ := codes.Decode(c); n != uint64(i+1) {
			t.Fatalf("code %q decodes to %d, want %d", c, n, i+1)
		}
	}
}

// Processes starting together on a new tag all lease its first ranges at
// once: every lease succeeds (no deadlock surfaces) and the leases are
// disjoint and dense.
func TestSQLSourceConcurrentFirstLeases(t *testing.T) {
	const contenders, rounds, step = 8, 10, 100
	ctx := context.Background()
	src := sqlSource(t)
	for round := range rounds {
		tag := fmt.Sprintf("fresh-%d", round)
		start := make(chan struct{})
		lasts := make(chan int64, contenders)
		var wg sync.WaitGroup
		for range contenders {
			wg.Go(func() {
				<-start
				last, err := src.Lease(ctx, tag, step)
				if err != nil {
					t.Errorf("round %d: %v", round, err)
					return
				}
				lasts <- last
			})
		}
		close(start)
		wg.Wait()
		close(lasts)
		var got []int64
		for last := range lasts {
			got = append(got, last)
		}
		slices.Sort(got)
		for i, last := range got {
			if last != int64(i+1)*step {
				t.Fatalf("round %d: leases end at %v, want %d multiples of %d", round, got, contenders, step)
			}
		}
		if len(got) != contenders {
			t.Fatalf("round %d: %d of %d leases succeeded", round, len(got), contenders)
		}
	}
}

// hangingSource leases normally until hang is set; then a lease blocks until
// its context ends and records how it ended.
type hangingSource struct {
	idgen.Source
	hang    atomic.Bool
	started chan struct{}
	ended   chan error
}

func (s *hangingSource) Lease(ctx context.Context, tag string, step int64) (int64, error) {
	if !s.hang.Load() {
		return s.Source.Lease(ctx, tag, step)
	}
	s.started <- struct{}{}
	<-ctx.Done()
	s.ended <- ctx.Err()
	return 0, ctx.Err()
}

// Close cancels a background prefetch and returns only once it has ended;
// afterwards Next fails with ErrClosed, and closing again is harmless.
func TestSegmentCloseStopsPrefetch(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	src := &hangingSource{Source: idgen.NewRedisSource(r.Client, r.Namespace), started: make(chan struct{}, 1), ended: make(chan error, 1)}
	seg, err := idgen.NewSegment(ctx, src, idgen.SegmentConfig{Tag: "t", Step: 10, FetchTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	src.hang.Store(true)
	for range 2 { // the 2nd id is 10% of the lease: the prefetch starts
		if _, err := seg.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	<-src.started
	seg.Close()
	select {
	case err := <-src.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("prefetch ended with %v, want context.Canceled", err)
		}
	default:
		t.Fatal("Close returned while the prefetch was still running")
	}
	if _, err := seg.Next(ctx); !errors.Is(err, idgen.ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
	seg.Close()
}

// stepSource records the steps it was asked for.
type stepSource struct {
	mu    sync.Mutex
	last  int64
	steps []int64
}

func (s *stepSource) Lease(_ context.Context, _ string, step int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last += step
	s.steps = append(s.steps, step)
	return s.last, nil
}

// The step adapts as in Leaf: doubling while a lease lasts less than the
// target (up to MaxStep), halving when one lasted over twice the target
// (down to Step), unchanged in between.
func TestSegmentDynamicStep(t *testing.T) {
	ctx := context.Background()
	clk := testenv.NewClock(testenv.Now().UTC().Truncate(24 * time.Hour))
	src := &stepSource{}
	seg, err := idgen.NewSegment(ctx, src, idgen.SegmentConfig{Tag: "t", Step: 10, MaxStep: 40, LeaseTarget: 15 * time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	leases := func() int {
		src.mu.Lock()
		defer src.mu.Unlock()
		return len(src.steps)
	}
	use := func(after time.Duration) { // `after` from the last fetch, take ids until the next lease is fetched
		t.Helper()
		clk.Add(after)
		want := leases() + 1
		for leases() < want {
			if _, err := seg.Next(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	use(time.Minute)      // fast: 20
	use(time.Minute)      // fast: 40
	use(time.Minute)      // fast, capped: 40
	use(20 * time.Minute) // within [target, 2 target]: 40
	use(time.Hour)        // slow: 20
	use(time.Hour)        // slow: 10
	use(time.Hour)        // slow, floored: 10
	src.mu.Lock()
	defer src.mu.Unlock()
	if fmt.Sprint(src.steps) != "[10 20 40 40 40 20 10 10]" {
		t.Fatalf("steps %v", src.steps)
	}
	if _, err := idgen.NewSegment(ctx, src, idgen.SegmentConfig{Tag: "t", Step: 10, MaxStep: 5}); !errors.Is(err, idgen.ErrSegmentConfig) {
		t.Fatalf("MaxStep below Step: %v", err)
	}
}
