// Package sqlutil holds the few things casebook's SQL code must know about
// the two dialects it runs on, MySQL/MariaDB and SQLite.
package sqlutil

import (
	"errors"
	"strconv"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"modernc.org/sqlite"
)

// IsDuplicate reports whether err is a unique-key violation: MySQL error 1062
// or SQLite's SQLITE_CONSTRAINT_PRIMARYKEY / SQLITE_CONSTRAINT_UNIQUE.
func IsDuplicate(err error) bool {
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		return my.Number == 1062
	}
	var lite *sqlite.Error
	if errors.As(err, &lite) {
		return lite.Code() == 1555 || lite.Code() == 2067
	}
	return false
}

// IsMySQL reports whether db speaks MySQL/MariaDB (otherwise SQLite).
func IsMySQL(db *sqlx.DB) bool { return db.DriverName() == "mysql" }

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
