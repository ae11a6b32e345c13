package testenv

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Retrier calls an operation until it succeeds, as a client of a block
// under a fault would, and counts the attempts that failed — so a fault
// test can tell that its fault was felt.
type Retrier struct {
	t      testing.TB
	failed atomic.Int64
}

// NewRetrier returns a Retrier that fails t when an operation keeps
// failing for a minute.
func NewRetrier(t testing.TB) *Retrier { return &Retrier{t: t} }

// Do calls op, with a few seconds each time, until it succeeds or done
// says its error is final (done may be nil).
func (r *Retrier) Do(what string, op func(ctx context.Context) error, done func(error) bool) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := op(ctx)
		cancel()
		if err == nil || done != nil && done(err) {
			return
		}
		r.failed.Add(1)
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: still failing after a minute: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Failed is how many attempts failed so far.
func (r *Retrier) Failed() int64 { return r.failed.Load() }
