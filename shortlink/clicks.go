package shortlink

import (
	"context"
	"sync"
	"time"
)

// clickCounter adds clicks up in memory and writes them to SQL every
// FlushEvery: one UPDATE per code per flush however hot the link. A crash
// loses at most one interval of counts; a failed write is retried with the
// next flush (at least once: a write whose reply was lost counts twice).
// (Striping the map by code was tried and measured no faster: the
// in-process cache dominates a cached resolve.)
type clickCounter struct {
	s      *Service
	mu     sync.Mutex
	counts map[string]int64
	stop   chan struct{}
	done   chan struct{}
}

func newClickCounter(s *Service) *clickCounter {
	c := &clickCounter{s: s, counts: map[string]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

func (c *clickCounter) add(code string) {
	c.mu.Lock()
	c.counts[code]++
	c.mu.Unlock()
}

func (c *clickCounter) pending(code string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[code]
}

func (c *clickCounter) drop(code string) {
	c.mu.Lock()
	delete(c.counts, code)
	c.mu.Unlock()
}

func (c *clickCounter) run() {
	c.s.flushLoop("click", "its counts stay for the next", c.flush, func() []any { return []any{"codes_kept", c.waiting()} }, c.stop, c.done)
}

// flushLoop calls flush every FlushEvery (each bounded by ten intervals)
// until stop is closed, then closes done. A failed flush is logged as
// "<what> flush failed; <kept>" with attrs() and the failures in a row,
// and passed to OnError; the first success after failures is logged too.
func (s *Service) flushLoop(what, kept string, flush func(context.Context) error, attrs func() []any, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(s.cfg.FlushEvery)
	defer t.Stop()
	failed := 0 // flushes failed in a row
	for {
		select {
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.FlushEvery*10)
			if err := flush(ctx); err != nil {
				failed++
				args := append(attrs(), "failed_flushes", failed, "retry_in", s.cfg.FlushEvery, "err", err)
				s.log.Warn("shortlink: "+what+" flush failed; "+kept, args...)
				s.cfg.OnError(err)
			} else if failed > 0 {
				s.log.Info("shortlink: "+what+" flush recovered", "failed_flushes", failed)
				failed = 0
			}
			cancel()
		case <-stop:
			return
		}
	}
}

// flush writes the counts; what fails to write is kept for the next flush.
func (c *clickCounter) flush(ctx context.Context) error {
	c.mu.Lock()
	batch := c.counts
	c.counts = map[string]int64{}
	c.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	err := c.s.addClicks(ctx, batch) // leaves in batch what it could not write
	if len(batch) > 0 {
		c.mu.Lock()
		for code, n := range batch {
			c.counts[code] += n
		}
		c.mu.Unlock()
	}
	return err
}

// waiting is how many codes have counts waiting.
func (c *clickCounter) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.counts)
}

func (c *clickCounter) close(ctx context.Context) error {
	close(c.stop)
	<-c.done
	return c.flush(ctx)
}
