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
	defer close(c.done)
	t := time.NewTicker(c.s.cfg.FlushEvery)
	defer t.Stop()
	failed := 0 // flushes failed in a row
	for {
		select {
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.FlushEvery*10)
			if err := c.flush(ctx); err != nil {
				failed++
				c.s.log.Warn("shortlink: click flush failed; its counts stay for the next", "codes_kept", c.waiting(),
					"failed_flushes", failed, "retry_in", c.s.cfg.FlushEvery, "err", err)
				c.s.cfg.OnError(err)
			} else if failed > 0 {
				c.s.log.Info("shortlink: click flush recovered", "failed_flushes", failed)
				failed = 0
			}
			cancel()
		case <-c.stop:
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
