// Package devstack opens the servers casebook runs on — Redis, a Redis
// Cluster, a SQL database and Kafka — either real ones named by the caller or
// embedded throw-away ones, so that tests, the examples, the benchmark
// harness and a service's own development setup share one way of reaching
// them. Open(ctx, FromEnv(), …) is what every example does; Run gives a
// program clean exits (signals, errors) so nothing it spawned is left behind.
//
// It is for development and tests: it links both SQL drivers, miniredis and
// kfake, which no block package does. A production service opens its own
// clients and hands them to the blocks.
//
// Embedded defaults, in order of preference:
//
//   - Redis: a redis-server process spawned on a free loopback port in a
//     temporary directory when the binary is on PATH, else miniredis
//     (in-process, Lua included, but not the real server).
//   - Redis Cluster: six spawned redis-server nodes (three masters, three
//     replicas) joined with CLUSTER MEET / ADDSLOTSRANGE / REPLICATE. There is
//     no in-process fallback; without the binary OpenCluster returns
//     ErrNoRedisServer.
//   - SQL: SQLite through modernc.org/sqlite (pure Go) in a temporary file.
//     A real MySQL/MariaDB DSN gets a fresh scratch database that Close drops.
//   - Kafka: a franz-go kfake cluster (in-process, real Kafka protocol).
//
// Every value returned here owns what it started: Close stops spawned
// processes and removes scratch databases; it never touches data it did not
// create.
package devstack
