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
// Every shortlink.Config setting that changes behaviour is a flag (-h lists
// them, with the library's defaults), e.g.
//
//	go run ./examples/shortlink -shared-miss-check -miss-limit 30/m -redirect 301
//
// Besides the library's routes it serves a link's stats as one HTML page,
// GET /api/links/{code}/stats.html (see statsPage).
package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
	apiKey := flag.String("api-key", os.Getenv("SHORTLINK_API_KEY"), "bearer key of the /api/ routes (default $SHORTLINK_API_KEY, else a random one, printed)")
	cfg := configFlags(flag.CommandLine)
	flag.Parse()
	if *apiKey == "" {
		*apiKey = rand.Text()
	}
	if *base == "" {
		*base = "http://" + *addr
	}
	cfg.BaseURL, cfg.Namespace = *base, "casebook-example"
	devstack.Run(func(ctx context.Context) error { return run(ctx, *addr, *sqlitePath, *apiKey, *cfg) })
}

func defaultSQLite() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "casebook", "shortlink.db")
}

func run(ctx context.Context, addr, sqlitePath, apiKey string, cfg shortlink.Config) error {
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

	svc, err := shortlink.NewService(r.Client, []*sqlx.DB{db}, cfg)
	if err != nil {
		return err
	}
	defer svc.Close() // flushes counted clicks
	if err := svc.Migrate(ctx); err != nil {
		return err
	}
	srv := devstack.Server(addr, routes(svc, apiKey)) // every timeout and header limit set
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	fmt.Printf("shortlink on http://%s — 256 tables in %s, %s Redis (%d node(s))\n", addr, db.DriverName(), r.Kind, len(r.Addrs))
	fmt.Printf("try: curl -s -H 'Authorization: Bearer %s' -X POST http://%s/api/links -d '{\"url\":\"https://go.dev/\"}'\n", apiKey, addr)
	fmt.Printf("a link's stats page: curl -s -H 'Authorization: Bearer %s' http://%s/api/links/<code>/stats.html > stats.html\n", apiKey, addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// routes serves the redirects to anyone and the API, with the stats page,
// to the bearer key: every link created with it is owned by "admin" (a real
// service asks its own auth).
func routes(svc *shortlink.Service, apiKey string) http.Handler {
	api := svc.APIHandler(func(r *http.Request) (string, bool) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		return "admin", ok && subtle.ConstantTimeCompare([]byte(got), []byte(apiKey)) == 1
	}, nil)
	mux := http.NewServeMux()
	mux.Handle("/", svc.RedirectHandler(nil))
	mux.Handle("/api/", api)
	mux.Handle("GET /api/links/{code}/stats.html", statsPage(svc, api))
	return mux
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
