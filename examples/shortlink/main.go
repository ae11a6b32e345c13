// Command shortlink serves the URL shortener over HTTP: 256 link tables, a
// Redis Cluster cache, per-IP limits, 302 redirects.
//
//	go run ./examples/shortlink          # listens on 127.0.0.1:8080
//
// Embedded defaults: a spawned Redis Cluster (one embedded Redis without the
// redis-server binary) and a SQLite file in the user's cache directory, so
// links survive a restart. Real servers: CASEBOOK_REDIS_CLUSTER or
// CASEBOOK_REDIS_ADDR, and CASEBOOK_MYSQL_DSN (a DSN naming a database keeps
// the links there; one naming none gets a scratch database dropped at exit).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/jmoiron/sqlx"
	_ "modernc.org/sqlite"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/shortlink"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	base := flag.String("base", "", "public base URL of short links (default http://<addr>)")
	sqlitePath := flag.String("sqlite", defaultSQLite(), "SQLite file, when CASEBOOK_MYSQL_DSN is not set")
	flag.Parse()
	if *base == "" {
		*base = "http://" + *addr
	}
	devstack.Run(func(ctx context.Context) error { return run(ctx, *addr, *base, *sqlitePath) })
}

func defaultSQLite() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "casebook", "shortlink.db")
}

func run(ctx context.Context, addr, base, sqlitePath string) error {
	env := devstack.FromEnv()
	r, err := env.OpenRedis(ctx, os.Stderr)
	if err != nil {
		return err
	}
	defer r.Close()
	db, closeDB, err := openSQL(ctx, env, sqlitePath)
	if err != nil {
		return err
	}
	defer closeDB()

	svc, err := shortlink.New([]*sqlx.DB{db}, r.Client, shortlink.Config{BaseURL: base, Namespace: "casebook-example"})
	if err != nil {
		return err
	}
	defer svc.Close(context.WithoutCancel(ctx)) // flushes counted clicks
	if err := svc.Migrate(ctx); err != nil {
		return err
	}
	srv := devstack.Server(addr, svc.Handler(nil)) // every timeout and header limit set
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	fmt.Printf("shortlink on http://%s — 256 tables in %s, %s Redis (%d node(s))\n", addr, db.DriverName(), r.Kind, len(r.Addrs))
	fmt.Printf("try: curl -s -X POST http://%s/api/links -d '{\"url\":\"https://go.dev/\"}'\n", addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// openSQL opens CASEBOOK_MYSQL_DSN's database, or the SQLite file.
func openSQL(ctx context.Context, env devstack.Env, sqlitePath string) (*sqlx.DB, func() error, error) {
	if env.MySQLDSN != "" {
		s, err := env.OpenSQL(ctx, "casebook_shortlink")
		if err != nil {
			return nil, nil, err
		}
		return s.DB, s.Close, nil
	}
	if err := os.MkdirAll(filepath.Dir(sqlitePath), 0o700); err != nil {
		return nil, nil, err
	}
	db, err := sqlx.Connect("sqlite", "file:"+sqlitePath+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, nil, err
	}
	return db, db.Close, nil
}
