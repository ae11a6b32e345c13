package seckill

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"time"

	"github.com/jmoiron/sqlx"
)

// errDecideAgain is returned inside a retried operation when a concurrent
// writer changed what it read (a row appeared between two statements): the
// operation starts over.
var errDecideAgain = errors.New("seckill: concurrent change, decide again")

// mysqlRetryable matches how MySQL drivers render a deadlock (1213), a lock
// wait timeout (1205) or a serialization failure (SQLSTATE 40001): "Error
// 1213 (40001): …". Reading the text keeps this package free of a driver
// import; internal/sqlutil could offer it as IsRetryable.
var mysqlRetryable = regexp.MustCompile(`^Error (1213|1205)\b|^Error \d+ \(40001\)`)

// retryable reports whether err is a transient conflict after which the
// whole transaction may simply run again.
func retryable(err error) bool {
	if errors.Is(err, errDecideAgain) {
		return true
	}
	var coded interface{ Code() int } // modernc.org/sqlite's *Error
	if errors.As(err, &coded) {
		switch coded.Code() & 0xff { // primary result code
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if mysqlRetryable.MatchString(e.Error()) {
			return true
		}
	}
	return false
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
