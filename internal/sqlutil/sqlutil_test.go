package sqlutil_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	_ "modernc.org/sqlite"

	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// On the real dialect: a duplicate key is recognised, other errors are not,
// and BinaryKey columns tell "abc" from "ABC".
func TestDuplicateAndBinaryKey(t *testing.T) {
	db := testenv.NewSQL(t)
	if _, err := db.Exec("CREATE TABLE k (code " + sqlutil.BinaryKey(db, 16) + " NOT NULL PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO k (code) VALUES ('abc'), ('ABC')"); err != nil {
		t.Fatalf("case-different keys collide: %v", err)
	}
	_, err := db.Exec("INSERT INTO k (code) VALUES ('abc')")
	if !sqlutil.IsDuplicate(err) {
		t.Fatalf("duplicate not recognised: %v", err)
	}
	_, err = db.Exec("INSERT INTO nope (code) VALUES ('x')")
	if err == nil || sqlutil.IsDuplicate(err) {
		t.Fatalf("missing table taken for a duplicate: %v", err)
	}
}

// A real deadlock (MariaDB) or a busy database (SQLite) is recognised as
// retryable, through wrapping, and Retry runs the transaction again until it
// commits.
func TestRetryableConflicts(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewSQL(t)
	if !sqlutil.IsMySQL(db) {
		t.Skip("deadlocks need two writers; SQLite serialises them (busy is covered by TestSQLiteBusyIsRetryable)")
	}
	for _, ddl := range []string{"CREATE TABLE d (id INT PRIMARY KEY, n INT)", "INSERT INTO d VALUES (1, 0), (2, 0)"} {
		if _, err := db.Exec(ddl); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := db.BeginTxx(ctx, nil)
	b, _ := db.BeginTxx(ctx, nil)
	defer a.Rollback()
	defer b.Rollback()
	a.Exec("UPDATE d SET n = 1 WHERE id = 1")
	b.Exec("UPDATE d SET n = 1 WHERE id = 2")
	errs := make(chan error, 2)
	go func() { _, err := a.Exec("UPDATE d SET n = 2 WHERE id = 2"); errs <- err }()
	time.Sleep(100 * time.Millisecond)
	go func() { _, err := b.Exec("UPDATE d SET n = 2 WHERE id = 1"); errs <- err }()
	var deadlock error
	for range 2 {
		if err := <-errs; err != nil {
			deadlock = err
		}
	}
	if deadlock == nil {
		t.Fatal("no deadlock happened")
	}
	wrapped := fmt.Errorf("block: op: %w", deadlock)
	if !sqlutil.IsRetryable(wrapped) || sqlutil.IsDuplicate(wrapped) {
		t.Fatalf("deadlock %v: retryable %v, duplicate %v", deadlock, sqlutil.IsRetryable(wrapped), sqlutil.IsDuplicate(wrapped))
	}
	tries := 0
	err := sqlutil.Retry(ctx, 5, func() error {
		if tries++; tries < 3 {
			return wrapped
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("Retry: %v after %d tries, want success on the 3rd", err, tries)
	}
	permanent := errors.New("not retryable")
	tries = 0
	if err := sqlutil.Retry(ctx, 5, func() error { tries++; return permanent }); err != permanent || tries != 1 {
		t.Fatalf("Retry of a permanent error: %v after %d tries", err, tries)
	}
}

func TestSQLiteBusyIsRetryable(t *testing.T) {
	dir := t.TempDir()
	open := func() *sqlx.DB {
		db, err := sqlx.Open("sqlite", "file:"+dir+"/busy.db?_pragma=busy_timeout(0)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	a, b := open(), open()
	if _, err := a.Exec("CREATE TABLE x (n INT)"); err != nil {
		t.Fatal(err)
	}
	tx, err := a.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("INSERT INTO x VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	_, err = b.Exec("INSERT INTO x VALUES (2)")
	if err == nil || !sqlutil.IsRetryable(fmt.Errorf("wrapped: %w", err)) {
		t.Fatalf("second writer: %v, want a retryable busy error", err)
	}
}

func TestCheckDrivers(t *testing.T) {
	db := testenv.NewSQL(t)
	if err := sqlutil.Check(db, "test"); err != nil {
		t.Fatal(err)
	}
	if err := sqlutil.Check(sqlx.NewDb(db.DB, "postgres"), "test"); err == nil {
		t.Fatal("postgres accepted")
	}
}

// A table made by an older version, without an index the current one
// declares, gets it from Create; Create run again (or by a second process
// at once) changes nothing and fails nothing.
func TestCreateAddsMissingIndexes(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewSQL(t)
	old := sqlutil.Table{Name: "t_ix", Columns: `id BIGINT NOT NULL PRIMARY KEY, a {{key}} NOT NULL, b BIGINT NOT NULL`, Indexes: []string{"ix_a (a)"}}
	if err := old.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO t_ix (id, a, b) VALUES (1, 'x', 1), (2, 'x', 2)`); err != nil {
		t.Fatal(err)
	}
	cur := old
	cur.Indexes = []string{"ix_a (a)", "ix_ab (a, b)", "UNIQUE uq_b (b)"}
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- cur.Create(ctx, db) }()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := cur.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.Get(&n, `SELECT COUNT(*) FROM t_ix`); err != nil || n != 2 {
		t.Fatalf("%d rows after the migration, want 2: %v", n, err)
	}
	if _, err := db.Exec(`INSERT INTO t_ix (id, a, b) VALUES (3, 'y', 2)`); !sqlutil.IsDuplicate(err) {
		t.Fatalf("a duplicate of the new unique index's column: %v, want a duplicate-key error", err)
	}
	names := map[string]bool{}
	var rows []string
	q := `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 't_ix'`
	if sqlutil.IsMySQL(db) {
		q = `SELECT DISTINCT index_name FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = 't_ix'`
	}
	if err := db.Select(&rows, q); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		names[strings.TrimPrefix(r, "t_ix_")] = true
	}
	for _, want := range []string{"ix_a", "ix_ab", "uq_b"} {
		if !names[want] {
			t.Errorf("index %s missing; the table has %v", want, rows)
		}
	}
}
