package testenv

import (
	"sync/atomic"
	"time"
)

// Clock is a settable time source for tests: pass its Now as a block's
// Config.Now and move time with Set and Add. Safe for concurrent use.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock {
	c := &Clock{}
	c.Set(t)
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Add moves the clock by d (backwards for negative d).
func (c *Clock) Add(d time.Duration) { c.ns.Add(int64(d)) }
