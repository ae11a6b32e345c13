package testenv

import (
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/faultproxy"
)

// Proxy is the one fault layer of casebook's tests (internal/faultproxy): a
// TCP proxy between the clients of a test and one server (a Redis, a
// MySQL/MariaDB server), able to delay, reset, black-hole and cut
// connections and to lose a reply after the server executed the request.
type Proxy = faultproxy.Proxy

// NewProxy proxies to target until the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// NewFaultyRedis returns the test's standalone Redis reached through a
// Proxy, with go-redis' default retries (a lost reply makes the client send
// the same command again on a new connection) and context deadlines obeyed
// (a call into a black hole ends with its context).
func NewFaultyRedis(t testing.TB) (*Redis, *Proxy) {
	t.Helper()
	r := NewRedis(t)
	addr := r.Client.(*redis.Client).Options().Addr
	p := NewProxy(t, addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return &Redis{Client: c, Namespace: r.Namespace, Kind: r.Kind}, p
}

// FaultySQL is n fresh databases on the test's MySQL/MariaDB server, each
// opened twice: through one Proxy (DBs, for the block under test) and
// directly (Direct, for the test to check invariants and to hold locks
// while the proxy misbehaves).
type FaultySQL struct {
	*Proxy
	DBs    []*sqlx.DB
	Direct []*sqlx.DB
}

// NewFaultySQL returns n databases reached through a Proxy, dropped at
// cleanup. SQLite has no connection to cut: without CASEBOOK_MYSQL_DSN the
// test is skipped (failed under CASEBOOK_REQUIRE_REAL).
func NewFaultySQL(t testing.TB, n int) *FaultySQL {
	t.Helper()
	dsn := os.Getenv(EnvMySQLDSN)
	if dsn == "" && !RequireReal() {
		t.Skipf("testenv: SQL network faults need a MySQL/MariaDB server (set %s); SQLite has no connection to cut", EnvMySQLDSN)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("testenv: mysql dsn: %v", err)
	}
	f := &FaultySQL{Proxy: NewProxy(t, cfg.Addr)}
	for _, s := range openSQLs(t, n) {
		c := cfg.Clone()
		c.Addr, c.DBName, c.ParseTime = f.Addr, s.Name, true
		db, err := sqlx.Open("mysql", c.FormatDSN())
		if err != nil {
			t.Fatalf("testenv: mysql %s through the proxy: %v", s.Name, err)
		}
		db.SetMaxOpenConns(16)
		db.SetMaxIdleConns(16)
		t.Cleanup(func() { db.Close() })
		f.DBs = append(f.DBs, db)
		f.Direct = append(f.Direct, s.DB)
	}
	return f
}
