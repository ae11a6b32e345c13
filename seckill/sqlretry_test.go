package seckill

import (
	"errors"
	"fmt"
	"testing"
)

type codedError int

func (e codedError) Error() string { return fmt.Sprintf("sqlite error %d", int(e)) }
func (e codedError) Code() int     { return int(e) }

func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{errors.New("Error 1213 (40001): Deadlock found when trying to get lock; try restarting transaction"), true},
		{errors.New("Error 1205 (HY000): Lock wait timeout exceeded; try restarting transaction"), true},
		{errors.New("Error 3101 (40001): Plugin instructed the server to rollback the current transaction"), true},
		{fmt.Errorf("seckill: insert order: %w", errors.New("Error 1213 (40001): Deadlock found")), true},
		{errors.New("Error 1062 (23000): Duplicate entry 'x' for key 'PRIMARY'"), false},
		{errors.New("seckill: Error 1213 is not at the start"), false},
		{fmt.Errorf("wrapped: %w", codedError(5)), true}, // SQLITE_BUSY
		{codedError(517), true},   // SQLITE_BUSY_SNAPSHOT
		{codedError(6), true},     // SQLITE_LOCKED
		{codedError(1555), false}, // SQLITE_CONSTRAINT_PRIMARYKEY
		{fmt.Errorf("pay: %w", errDecideAgain), true},
		{ErrNotReady, false},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
