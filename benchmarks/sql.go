package main

import (
	"context"

	"github.com/casebook-dev/casebook/internal/devcore"
)

// embeddedSQL opens the SQL stand-in, a database named after prefix, when
// no MySQL/MariaDB is named. It is nil in the default binary: SQLite
// (modernc.org/sqlite) is linked only with -tags casebook_sqlite (sqlite.go),
// because compiling it is most of a cold `go run ./benchmarks` — 200 s of
// CPU with it, 153 s without, measured with
// `GOCACHE=$(mktemp -d) /usr/bin/time go build ./benchmarks` on the
// project's 2-core machine. Without a SQL database, the measurements that
// need one do not run (Result.NotRun) and their loads are sized from the
// reference profile; on SQLite they would have been too, SQLite being a
// stand-in.
var embeddedSQL func(prefix string) (*devcore.SQL, error)

// noSQL is what a measurement that needs SQL says when there is none; the
// run's first line says how to have one.
const noSQL = "needs SQL, none in this run"

// openSQL opens a scratch database on dsn's server, else the embedded SQL
// database, else fails with devcore.ErrNoSQL.
func openSQL(ctx context.Context, dsn, prefix string) (*devcore.SQL, error) {
	switch {
	case dsn != "":
		return devcore.OpenMySQL(ctx, dsn, prefix)
	case embeddedSQL == nil:
		return nil, devcore.ErrNoSQL
	}
	return embeddedSQL(prefix)
}
