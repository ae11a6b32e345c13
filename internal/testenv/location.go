package testenv

import (
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
)

// Location is how another pool or process opens db's database: the driver
// name and a DSN — the MySQL server of EnvMySQLDSN with db's database
// selected (and parseTime, as the suite's own pools), or db's SQLite file
// with a busy timeout and immediate transactions.
func Location(t testing.TB, db *sqlx.DB) (driver, dsn string) {
	t.Helper()
	if db.DriverName() == "mysql" {
		var name string
		if err := db.Get(&name, "SELECT DATABASE()"); err != nil {
			t.Fatal(err)
		}
		cfg, err := mysql.ParseDSN(os.Getenv(EnvMySQLDSN))
		if err != nil {
			t.Fatal(err)
		}
		cfg.DBName, cfg.ParseTime = name, true
		return "mysql", cfg.FormatDSN()
	}
	var file string
	if err := db.Get(&file, "SELECT file FROM pragma_database_list WHERE name = 'main'"); err != nil {
		t.Fatal(err)
	}
	return db.DriverName(), "file:" + file + "?_pragma=busy_timeout(20000)&_txlock=immediate"
}
