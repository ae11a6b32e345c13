package idgen

import (
	"context"
	"errors"
	"math/rand/v2"
	"regexp"
	"time"
)

// retryable reports whether err is a transaction the database rolled back
// (or refused) for a lock conflict, which succeeds when run again: MySQL and
// MariaDB's deadlock (1213) and lock wait timeout (1205), SQLSTATE 40001
// (serialisation failure), SQLite's SQLITE_BUSY and SQLITE_LOCKED.
//
// It recognises the drivers' errors without linking the drivers (a service
// links only the one it uses): modernc.org/sqlite's error has a Code()
// method, a driver reporting SQLSTATE may have SQLState(), and
// go-sql-driver/mysql's error, whose number is a field, reads
// "Error 1213 (40001): …".
func retryable(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		switch e := err.(type) {
		case interface{ Code() int }:
			if c := e.Code() & 0xff; c == sqliteBusy || c == sqliteLocked { // primary result code
				return true
			}
		case interface{ SQLState() string }:
			if e.SQLState() == "40001" {
				return true
			}
		}
		if mysqlRetryable.MatchString(err.Error()) {
			return true
		}
	}
	return false
}

const sqliteBusy, sqliteLocked = 5, 6

var mysqlRetryable = regexp.MustCompile(`^Error (1213|1205)\b|^Error \d+ \(40001\)`)

// backoff is how long to wait before retry number attempt+1: full jitter
// over an exponentially growing window (1 ms, 2 ms, … up to 250 ms), so
// contenders that collided spread out instead of colliding again.
func backoff(attempt int) time.Duration {
	window := maxBackoff
	if attempt < 8 {
		window = min(maxBackoff, time.Millisecond<<attempt)
	}
	return time.Duration(rand.Int64N(int64(window))) + 1
}

const maxBackoff = 250 * time.Millisecond

// sleep waits d or until ctx ends, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
