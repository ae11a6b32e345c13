package seckill

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// A decision to make again and the database's transient conflicts retry;
// anything else does not. (The drivers' errors in all their forms are
// tested in internal/sqlutil against real servers.)
func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&mysql.MySQLError{Number: 1213, Message: "Deadlock found"}, true},
		{fmt.Errorf("seckill: insert order: %w", &mysql.MySQLError{Number: 1205}), true},
		{&mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}, false},
		{errors.New("Error 1213 (40001): a string that merely looks like a deadlock"), false},
		{fmt.Errorf("pay: %w", errDecideAgain), true},
		{ErrNotReady, false},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
