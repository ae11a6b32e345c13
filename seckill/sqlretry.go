package seckill

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/sqlutil"
)

// errDecideAgain is returned inside a retried operation when a concurrent
// writer changed what it read (a row appeared between two statements): the
// operation starts over.
var errDecideAgain = errors.New("seckill: concurrent change, decide again")

// retryable reports whether err is a transient conflict after which the
// whole transaction may simply run again: a decision to make again, or a
// deadlock, lock wait timeout, serialization failure or busy SQLite.
func retryable(err error) bool {
	return errors.Is(err, errDecideAgain) || sqlutil.IsRetryable(err)
}

// withRetry runs op until it returns nil or an error that is not retryable,
// backing off exponentially (1 ms doubling to 100 ms) with full jitter in
// between, for as long as ctx lasts. op must be safe to run again.
func withRetry(ctx context.Context, op func() error) error {
	backoff := time.Millisecond
	for {
		err := op()
		if err == nil || !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		case <-time.After(rand.N(backoff) + time.Microsecond):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// inTx runs fn in a transaction, committed when fn returns nil, and runs it
// again from the start as withRetry says.
func (s *Service) inTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return withRetry(ctx, func() error {
		tx, err := s.db.BeginTxx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := fn(tx); err != nil {
			return err
		}
		return tx.Commit()
	})
}
