// Package sqlutil holds the few things casebook's SQL code must know about
// the dialects it runs on — MySQL 8 / MariaDB 10.6+ and SQLite — without
// linking either driver: a service that imports a block brings its own
// driver (github.com/go-sql-driver/mysql or modernc.org/sqlite), and the
// block recognises that driver's errors by their shape.
package sqlutil

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
)

// MySQL and SQLite error codes the blocks act on.
const (
	mysqlDuplicate       = 1062
	mysqlLockWaitTimeout = 1205
	mysqlDeadlock        = 1213
	sqliteBusy           = 5
	sqliteLocked         = 6
	sqlitePrimaryKey     = 1555 // SQLITE_CONSTRAINT_PRIMARYKEY
	sqliteUnique         = 2067 // SQLITE_CONSTRAINT_UNIQUE
)

// IsDuplicate reports whether err is a unique-key violation: MySQL error 1062
// or SQLite's SQLITE_CONSTRAINT_PRIMARYKEY / SQLITE_CONSTRAINT_UNIQUE.
func IsDuplicate(err error) bool {
	if n, ok := mysqlNumber(err); ok {
		return n == mysqlDuplicate
	}
	if c, ok := sqliteCode(err); ok {
		return c == sqlitePrimaryKey || c == sqliteUnique
	}
	return false
}

// IsRetryable reports whether err aborted a transaction that may simply be
// run again: a MySQL deadlock (1213) or lock wait timeout (1205), SQLSTATE
// 40001 (serialization failure), or SQLite busy / locked.
func IsRetryable(err error) bool {
	if n, ok := mysqlNumber(err); ok {
		return n == mysqlDeadlock || n == mysqlLockWaitTimeout || mysqlState(err) == "40001"
	}
	if c, ok := sqliteCode(err); ok {
		return c&0xff == sqliteBusy || c&0xff == sqliteLocked
	}
	return false
}

// Retry runs fn until it returns nil or an error IsRetryable does not accept,
// at most attempts times (0: until ctx ends), pausing with jittered
// exponential backoff (from 5 ms, capped at 500 ms) between tries, so that
// contenders that collided spread out instead of colliding again.
func Retry(ctx context.Context, attempts int, fn func() error) error {
	pause := 5 * time.Millisecond
	for i := 1; ; i++ {
		err := fn()
		if err == nil || !IsRetryable(err) || (attempts > 0 && i >= attempts) {
			return err
		}
		t := time.NewTimer(pause/2 + rand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up retrying: %w)", err, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// InTx runs fn in a transaction on db and commits it; when the database
// aborts it for a deadlock, a lock wait timeout or a busy SQLite file, the
// whole transaction runs again (up to 10 times, see Retry).
func InTx(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	return InTxOpts(ctx, db, nil, fn)
}

// InTxOpts is InTx with transaction options (an isolation level).
func InTxOpts(ctx context.Context, db *sqlx.DB, opts *sql.TxOptions, fn func(tx *sqlx.Tx) error) error {
	return Retry(ctx, 10, func() error {
		tx, err := db.BeginTxx(ctx, opts)
		if err != nil {
			return fmt.Errorf("sql begin: %w", err)
		}
		defer tx.Rollback()
		if err := fn(tx); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("sql commit: %w", err)
		}
		return nil
	})
}

// mysqlNumber finds a go-sql-driver *mysql.MySQLError in err's chain and
// returns its Number, without importing the driver.
func mysqlNumber(err error) (uint16, bool) {
	v, ok := driverError(err, "MySQLError")
	if !ok {
		return 0, false
	}
	f := v.FieldByName("Number")
	if f.Kind() != reflect.Uint16 {
		return 0, false
	}
	return uint16(f.Uint()), true
}

func mysqlState(err error) string {
	v, ok := driverError(err, "MySQLError")
	if !ok {
		return ""
	}
	f := v.FieldByName("SQLState")
	if f.Kind() != reflect.Array || f.Len() != 5 {
		return ""
	}
	b := make([]byte, 5)
	for i := range b {
		b[i] = byte(f.Index(i).Uint())
	}
	return string(b)
}

// driverError returns the struct behind the first error in err's chain whose
// type is a pointer to a struct named name.
func driverError(err error, name string) (reflect.Value, bool) {
	var found reflect.Value
	walk(err, func(e error) bool {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct && v.Elem().Type().Name() == name {
			found = v.Elem()
			return true
		}
		return false
	})
	return found, found.IsValid()
}

// sqliteCode finds modernc.org/sqlite's *sqlite.Error (which has a Code()
// int method) in err's chain.
func sqliteCode(err error) (int, bool) {
	var code int
	ok := walk(err, func(e error) bool {
		c, isCoded := e.(interface{ Code() int })
		if isCoded && reflect.TypeOf(e).String() == "*sqlite.Error" {
			code = c.Code()
			return true
		}
		return false
	})
	return code, ok
}

// walk visits err's chain (both Unwrap forms) until visit returns true.
func walk(err error, visit func(error) bool) bool {
	for err != nil {
		if visit(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walk(e, visit) {
					return true
				}
			}
			return false
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return false
		}
	}
	return false
}

// IsMySQL reports whether db speaks MySQL/MariaDB (otherwise SQLite).
func IsMySQL(db *sqlx.DB) bool { return db.DriverName() == "mysql" }

// Check verifies that db is one of the supported dialects and readies a
// SQLite pool: SQLite allows one writer at a time, and concurrent
// connections of one pool then fail DDL and writes with SQLITE_BUSY, so a
// SQLite pool is limited to one open connection (which serialises its use in
// this process, as SQLite would anyway). Blocks call it from New.
func Check(db *sqlx.DB, block string) error {
	if db == nil {
		return fmt.Errorf("%s: nil database", block)
	}
	switch db.DriverName() {
	case "mysql":
	case "sqlite", "sqlite3":
		db.SetMaxOpenConns(1)
	default:
		return fmt.Errorf("%s: database driver %q: supported are \"mysql\" (MySQL 8, MariaDB 10.6+) and \"sqlite\"", block, db.DriverName())
	}
	return nil
}

// BinaryKey is a column type for case-sensitive ASCII keys (codes, ids): in
// MySQL a binary collation, whatever the database default; SQLite compares
// bytes already.
func BinaryKey(db *sqlx.DB, length int) string {
	t := "VARCHAR(" + strconv.Itoa(length) + ")"
	if IsMySQL(db) {
		t += " CHARACTER SET ascii COLLATE ascii_bin"
	}
	return t
}

// Table is one table with its secondary indexes, written once for both
// dialects: in Columns, {{key}} is a case-sensitive ASCII key column of 64
// bytes and {{serial}} an auto-increment primary key. An index is
// "name (col, …)", unique when it starts with "UNIQUE ".
type Table struct {
	Name    string
	Columns string
	Indexes []string
}

// Create makes t on db when it does not exist, and adds to an existing
// table the indexes it lacks (a table made by an older version): SQLite by
// CREATE INDEX IF NOT EXISTS, MySQL — which has no such statement — by
// ALTER TABLE … ADD KEY for each index information_schema does not list.
// Safe to run again and from several processes at once (an index another
// process added meanwhile is not an error).
func (t Table) Create(ctx context.Context, db *sqlx.DB) error {
	for _, stmt := range t.Statements(db) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create %s: %w", t.Name, err)
		}
	}
	if !IsMySQL(db) {
		return nil
	}
	var have []string
	if err := db.SelectContext(ctx, &have, `SELECT DISTINCT index_name FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = ?`, t.Name); err != nil {
		return fmt.Errorf("indexes of %s: %w", t.Name, err)
	}
	for _, ix := range t.Indexes {
		unique := strings.HasPrefix(ix, "UNIQUE ")
		name, cols, _ := strings.Cut(strings.TrimPrefix(ix, "UNIQUE "), " ")
		if slices.ContainsFunc(have, func(h string) bool { return strings.EqualFold(h, name) }) {
			continue
		}
		kind := "KEY"
		if unique {
			kind = "UNIQUE KEY"
		}
		_, err := db.ExecContext(ctx, "ALTER TABLE "+t.Name+" ADD "+kind+" "+name+" "+cols)
		if n, ok := mysqlNumber(err); err != nil && (!ok || n != 1061) { // 1061: duplicate key name
			return fmt.Errorf("add index %s to %s: %w", name, t.Name, err)
		}
	}
	return nil
}

// Statements renders t for db's dialect, each statement safe to run again:
// MySQL takes the indexes inside CREATE TABLE IF NOT EXISTS (it has no
// CREATE INDEX IF NOT EXISTS), SQLite as separate statements.
func (t Table) Statements(db *sqlx.DB) []string {
	mysql := IsMySQL(db)
	serial := "INTEGER PRIMARY KEY AUTOINCREMENT"
	if mysql {
		serial = "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY"
	}
	cols := strings.NewReplacer("{{key}}", BinaryKey(db, 64), "{{serial}}", serial).Replace(t.Columns)
	var inline, after []string
	for _, ix := range t.Indexes {
		unique := strings.HasPrefix(ix, "UNIQUE ")
		name, colList, _ := strings.Cut(strings.TrimPrefix(ix, "UNIQUE "), " ")
		switch {
		case mysql && unique:
			inline = append(inline, "UNIQUE KEY "+name+" "+colList)
		case mysql:
			inline = append(inline, "KEY "+name+" "+colList)
		case unique:
			after = append(after, fmt.Sprintf("CREATE UNIQUE INDEX IF NOT EXISTS %s_%s ON %s %s", t.Name, name, t.Name, colList))
		default:
			after = append(after, fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s_%s ON %s %s", t.Name, name, t.Name, colList))
		}
	}
	if len(inline) > 0 {
		cols += ",\n\t" + strings.Join(inline, ",\n\t")
	}
	return append([]string{"CREATE TABLE IF NOT EXISTS " + t.Name + " (\n\t" + cols + "\n)"}, after...)
}
