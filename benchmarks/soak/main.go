// Command soak drives several casebook blocks at a steady rate through fault
// proxies in front of Redis and the SQL server, injecting faults at random,
// then heals the network and checks each block's invariants against what its
// callers were told (see runSoak). It measures nothing: the capacity plan is
// `go run ./benchmarks`; this is a separate command so that the plan's binary
// does not link the fault proxies (toxiproxy and its tree).
//
//	go run ./benchmarks/soak -duration 10m -redis 127.0.0.1:6379 -mysql 'root@tcp(127.0.0.1:3306)/'
//
// With no -redis it soaks a spawned redis-server (else miniredis), and with
// no -mysql SQLite, which has no connection to cut: faults then hit Redis
// only. It exits 1 when an invariant fails or the run is interrupted, 2 for
// bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/devstack"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// quiet drops go-redis' own log lines (connection pool retries), which a
// fault injected on purpose would otherwise fill the terminal with.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d := fs.Duration("duration", 10*time.Minute, "how long to drive rank, signin, shortlink, seckill, feed and hotlist through fault proxies (10s..24h) before checking their invariants")
	rate := fs.Int("rate", 100, "operations per second per block (1..10000)")
	redisArg := fs.String("redis", os.Getenv(devstack.EnvRedisAddr), "Redis host:port (default: a spawned redis-server, else miniredis)")
	mysqlArg := fs.String("mysql", os.Getenv(devstack.EnvMySQLDSN), "MySQL/MariaDB DSN; a scratch database is created and dropped (default: SQLite, with no SQL faults)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "soak: unexpected arguments %q (flags only; see -h)\n", fs.Args())
		return 2
	case *d < 10*time.Second || *d > 24*time.Hour:
		fmt.Fprintf(stderr, "soak: -duration %v is outside 10s..24h\n", *d)
		return 2
	case *rate < 1 || *rate > 10000:
		fmt.Fprintf(stderr, "soak: -rate %d is outside 1..10000\n", *rate)
		return 2
	}
	redis.SetLogger(quiet{})
	return runSoak(ctx, *redisArg, *mysqlArg, *d, *rate, stdout, stderr)
}

// describeRedis names a Redis backend for the report: a server the user
// named keeps its address; a spawned or embedded one's port is throw-away.
func describeRedis(r *devstack.Redis) string {
	switch r.Kind {
	case devstack.External:
		return "Redis " + r.Addrs[0]
	case devstack.Spawned:
		return "spawned redis-server"
	}
	return string(r.Kind)
}
