package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// EnvClockOffset shifts Now, the wall clock every test reads: a Go duration
// ("9600h", "-90m") or a whole number of days ("400d"). CI runs the
// date-sensitive packages once with CASEBOOK_TEST_CLOCK_OFFSET=400d to
// prove that no test depends on the calendar: a suite that passes today and
// fails on some later date fails that run instead. An LD_PRELOAD clock
// faker cannot do this for Go, whose runtime reads the clock through the
// vDSO.
const EnvClockOffset = "CASEBOOK_TEST_CLOCK_OFFSET"

var clockOffset = mustClockOffset(os.Getenv(EnvClockOffset))

func mustClockOffset(s string) time.Duration {
	d, err := parseClockOffset(s)
	if err != nil {
		panic(fmt.Sprintf("testenv: %s=%q: %v", EnvClockOffset, s, err))
	}
	return d
}

func parseClockOffset(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, fmt.Errorf("want a duration or a whole number of days: %w", err)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// Now is the wall clock as every test must read it: time.Now shifted by
// CASEBOOK_TEST_CLOCK_OFFSET. Pass it (or a Clock started from it) as a
// block's Config.Now, and build epochs relative to it, never from a fixed
// date; tests outside this file do not call time.Now (TestNoCalendarInTests).
// It keeps time.Now's monotonic reading, so durations between two Now calls
// are exact.
func Now() time.Time { return time.Now().Add(clockOffset) }

// Since is time.Since on the test clock.
func Since(t time.Time) time.Duration { return Now().Sub(t) }

// ClockOffset is the shift Now applies (zero unless the variable is set).
func ClockOffset() time.Duration { return clockOffset }

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
