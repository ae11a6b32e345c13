package idgen

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "modernc.org/sqlite"
)

// The drivers' own errors for lock conflicts are retried; everything else is
// not.
func TestRetryableLockConflicts(t *testing.T) {
	state := func(s string) (b [5]byte) { copy(b[:], s); return b }
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&mysql.MySQLError{Number: 1213, SQLState: state("40001"), Message: "Deadlock found when trying to get lock"}, true},
		{fmt.Errorf("lease: %w", &mysql.MySQLError{Number: 1205, SQLState: state("HY000"), Message: "Lock wait timeout exceeded"}), true},
		{&mysql.MySQLError{Number: 1213, Message: "Deadlock found (no SQLSTATE from the server)"}, true},
		{&mysql.MySQLError{Number: 3101, SQLState: state("40001"), Message: "serialization failure"}, true},
		{&mysql.MySQLError{Number: 1062, SQLState: state("23000"), Message: "Duplicate entry 'Error 1213'"}, false},
		{&mysql.MySQLError{Number: 1146, SQLState: state("42S02"), Message: "Table doesn't exist"}, false},
		{fmt.Errorf("wrapped: %w", sqliteBusyError(t)), true},
		{sql.ErrNoRows, false},
		{context.DeadlineExceeded, false},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// sqliteBusyError is a real SQLITE_BUSY: a write while another connection
// holds the write lock, with no busy timeout.
func sqliteBusyError(t *testing.T) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "busy.db")
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	ctx := context.Background()
	holder, writer := open(), open()
	if _, err := holder.Exec("CREATE TABLE t (x INT)"); err != nil {
		t.Fatal(err)
	}
	conn, err := holder.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK")
	_, err = writer.Exec("INSERT INTO t VALUES (1)")
	if err == nil {
		t.Fatal("write under another connection's write lock succeeded")
	}
	return err
}

func TestBackoffWindows(t *testing.T) {
	for attempt, window := range map[int]time.Duration{0: time.Millisecond, 3: 8 * time.Millisecond, 7: 128 * time.Millisecond, 8: maxBackoff, 64: maxBackoff} {
		for range 100 {
			if d := backoff(attempt); d < 1 || d > window {
				t.Fatalf("backoff(%d) = %v, want within (0, %v]", attempt, d, window)
			}
		}
	}
}
