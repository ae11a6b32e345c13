package devstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/casebook-dev/casebook/internal/devcore"
)

// Kind says what a backend really is, so callers can refuse a fallback.
type Kind = devcore.Kind

const (
	External  = devcore.External  // a server the caller named
	Spawned   = devcore.Spawned   // a real server process this package started
	Miniredis = devcore.Miniredis // in-process Redis emulation (fallback)
	SQLite    = devcore.SQLite    // in-process SQLite (fallback for MySQL)
	KFake     = devcore.KFake     // in-process Kafka cluster (real protocol)
)

// Redis is an open Redis backend: Client, what it is (Kind), its addresses,
// and for a spawned standalone process the Server (tests restart it to inject
// faults). Close closes the client and stops what was spawned.
type Redis = devcore.Redis

// RedisServer is a redis-server process this package spawned.
type RedisServer = devcore.RedisServer

// RedisCluster is a spawned six-node Redis Cluster.
type RedisCluster = devcore.RedisCluster

// SQL is an open SQL database: a scratch database on the named MySQL/MariaDB
// server, or a SQLite file. Close closes the pool and drops the scratch
// database or removes the file.
type SQL = devcore.SQL

// ErrNoRedisServer: the redis-server binary is not on PATH.
var ErrNoRedisServer = devcore.ErrNoRedisServer

// HaveRedisServer reports whether the redis-server binary is on PATH.
func HaveRedisServer() bool { return devcore.HaveRedisServer() }

// StartRedisServer spawns a redis-server on a free loopback port in a
// temporary directory, with no persistence, passing extra as arguments.
func StartRedisServer(ctx context.Context, extra ...string) (*RedisServer, error) {
	return devcore.StartRedisServer(ctx, extra...)
}

// StartRedisCluster spawns six redis-server nodes (three masters, three
// replicas) and joins them into a cluster; ErrNoRedisServer without the
// binary.
func StartRedisCluster(ctx context.Context) (*RedisCluster, error) {
	return devcore.StartRedisCluster(ctx)
}

// OpenRedis connects to addr, or when addr is empty starts a redis-server
// (or, without the binary, miniredis).
func OpenRedis(ctx context.Context, addr string) (*Redis, error) { return devcore.OpenRedis(ctx, addr) }

// OpenRedisCluster connects to the cluster that addrs belong to, or when
// addrs is empty spawns a six-node cluster (ErrNoRedisServer without the
// binary).
func OpenRedisCluster(ctx context.Context, addrs []string) (*Redis, error) {
	return devcore.OpenRedisCluster(ctx, addrs)
}

// OpenSQL creates a fresh database named "<prefix>_<random>" on the
// MySQL/MariaDB server of dsn (the DSN's own database name is ignored), or
// when dsn is empty a SQLite file in a temporary directory.
func OpenSQL(ctx context.Context, dsn, prefix string) (*SQL, error) {
	if dsn == "" {
		return openSQLite(prefix + "_" + RandomHex(6))
	}
	return devcore.OpenMySQL(ctx, dsn, prefix)
}

func openSQLite(name string) (*SQL, error) {
	dir, err := devcore.TempDir("sqlite")
	if err != nil {
		return nil, fmt.Errorf("devstack: sqlite dir: %w", err)
	}
	path := filepath.Join(dir, name+".db")
	// busy_timeout makes writers queue instead of failing with SQLITE_BUSY;
	// _txlock=immediate takes the write lock at BEGIN so read-then-write
	// transactions cannot deadlock.
	dsn := "file:" + path + "?_pragma=busy_timeout(20000)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sqlx.Open("sqlite", dsn)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("devstack: sqlite: %w", err)
	}
	// SQLite has one writer. A single connection makes every caller queue
	// here instead of meeting SQLITE_BUSY, or SQLITE_SCHEMA when another
	// connection's DDL invalidates a prepared statement (concurrent CREATE
	// TABLE did, in CI). Nothing in casebook queries the pool while holding
	// one of its transactions, so one connection cannot deadlock.
	db.SetMaxOpenConns(1)
	// WAL lets readers run beside the one writer. It is a property of the
	// file, set once here: switching it from many new connections at once
	// fails with SQLITE_BUSY, which the busy handler does not cover.
	if _, err := db.Exec("PRAGMA journal_mode=WAL"); err != nil {
		db.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("devstack: sqlite WAL: %w", err)
	}
	remove := func() error {
		db.Close()
		return os.RemoveAll(dir)
	}
	return devcore.NewSQL(db, SQLite, path, remove), nil
}

// Kafka is an open Kafka backend.
type Kafka struct {
	Brokers []string
	Kind    Kind
	closer  func()
}

// Close stops an embedded cluster; it does nothing for an external one.
func (k *Kafka) Close() error {
	if k.closer != nil {
		k.closer()
	}
	return nil
}

// OpenKafka uses brokers, or when brokers is empty starts a three-broker kfake
// cluster that creates topics on first use.
func OpenKafka(brokers []string) (*Kafka, error) {
	if len(brokers) > 0 {
		return &Kafka{Brokers: brokers, Kind: External}, nil
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(8))
	if err != nil {
		return nil, fmt.Errorf("devstack: kfake: %w", err)
	}
	return &Kafka{Brokers: c.ListenAddrs(), Kind: KFake, closer: c.Close}, nil
}

// SplitList splits a comma-separated list of addresses, dropping blanks.
func SplitList(s string) []string { return devcore.SplitList(s) }

// RandomHex returns 2n random hex digits, for unique scratch names.
func RandomHex(n int) string { return devcore.RandomHex(n) }

// DeleteKeys unlinks every key matching pattern, on every master of a
// cluster. Keys are unlinked one per command so keys of different slots never
// meet in one call.
func DeleteKeys(ctx context.Context, c redis.UniversalClient, pattern string) error {
	return devcore.DeleteKeys(ctx, c, pattern)
}
