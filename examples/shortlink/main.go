// Command shortlink is a URL shortener server: 256 link tables, a Redis
// Cluster cache, redirects and a JSON API.
//
//	go run ./examples/shortlink
//	curl -s -X POST localhost:8080/api/links -d '{"url":"https://go.dev/"}'
//	curl -si localhost:8080/<code>
//
// With no flags it runs on embedded backends: a spawned local Redis Cluster
// (one embedded Redis without the redis-server binary) and a SQLite file.
// -cluster names a real Redis Cluster, -mysql a MySQL/MariaDB database.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	_ "modernc.org/sqlite"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/shortlink"
)

func main() {
	var (
		addr       = flag.String("addr", "127.0.0.1:8080", "listen address")
		base       = flag.String("base", "", "public base URL of short links (default http://<addr>)")
		clusterArg = flag.String("cluster", os.Getenv("CASEBOOK_REDIS_CLUSTER"), "Redis Cluster nodes host:port,… (default: spawn a local cluster)")
		mysqlDSN   = flag.String("mysql", "", "MySQL/MariaDB DSN of an existing database, e.g. root@tcp(127.0.0.1:3306)/links (default: SQLite)")
		sqlitePath = flag.String("sqlite", filepath.Join(os.TempDir(), "casebook-shortlink.db"), "SQLite file when -mysql is not given")
	)
	flag.Parse()
	if *base == "" {
		*base = "http://" + *addr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	r, err := devstack.OpenClusterOrStandalone(ctx, devstack.SplitList(*clusterArg), os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	db, err := openSQL(*mysqlDSN, *sqlitePath)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	svc, err := shortlink.New([]*sqlx.DB{db}, r.Client, shortlink.Config{BaseURL: *base, Namespace: "casebook-example"})
	if err != nil {
		log.Fatal(err)
	}
	if err := svc.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: *addr, Handler: svc.Handler(nil), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	fmt.Printf("shortlink on http://%s — 256 tables in %s, %s Redis (%d node(s))\n", *addr, db.DriverName(), r.Kind, len(r.Addrs))
	fmt.Printf("try: curl -s -X POST http://%s/api/links -d '{\"url\":\"https://go.dev/\"}'\n", *addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Print(err)
	}
	if err := svc.Close(context.Background()); err != nil { // flush counted clicks
		log.Print(err)
	}
}

func openSQL(mysqlDSN, sqlitePath string) (*sqlx.DB, error) {
	if mysqlDSN != "" {
		return sqlx.Connect("mysql", mysqlDSN)
	}
	db, err := sqlx.Connect("sqlite", "file:"+sqlitePath+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // one writer; see devstack
	return db, nil
}
