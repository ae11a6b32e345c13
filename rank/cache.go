package rank

import (
	"context"
	"time"
)

// TopCached returns the best n members from a copy held in this process and
// refreshed at most once per Staleness: concurrent readers share one fetch
// (singleflight) and, while the copy is fresh, no reader touches Redis. The
// returned slice is shared: do not modify it.
func (b *Board) TopCached(ctx context.Context, n int) ([]Entry, error) {
	c := b.cached.Load()
	if c != nil && c.covers(n) && b.cfg.Now().Sub(c.at) < b.cfg.Staleness {
		return c.entries[:min(n, len(c.entries))], nil
	}
	v, err, _ := b.flight.Do("top", func() (any, error) {
		asked := n
		if c != nil {
			asked = max(n, c.asked)
		}
		top, err := b.Top(ctx, asked)
		if err != nil {
			return nil, err
		}
		fresh := &cachedTop{entries: top, asked: asked, at: b.cfg.Now()}
		b.cached.Store(fresh)
		return fresh, nil
	})
	if err != nil {
		return nil, err
	}
	if got := v.(*cachedTop); got.covers(n) {
		return got.entries[:min(n, len(got.entries))], nil
	}
	return b.Top(ctx, n) // joined a smaller fetch in flight
}

type cachedTop struct {
	entries []Entry
	asked   int // how many were asked for; fewer came back if the board is smaller
	at      time.Time
}

func (c *cachedTop) covers(n int) bool {
	return c.asked >= n || len(c.entries) < c.asked
}
