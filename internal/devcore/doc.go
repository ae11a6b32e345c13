// Package devcore is the part of devstack that links no embedded SQL
// database and no embedded Kafka: real or spawned Redis (and miniredis), a
// spawned Redis Cluster, and scratch databases on a named MySQL/MariaDB
// server. devstack re-exports it and adds SQLite and kfake; the capacity
// harness imports it directly, so that `go run ./benchmarks` does not compile
// modernc.org/sqlite (about 57 s of CPU from a cold build cache on the
// project's 2-core machine) unless built with -tags casebook_sqlite.
//
// Its errors say "devstack:": they reach users through devstack.
package devcore
