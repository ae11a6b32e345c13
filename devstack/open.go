package devstack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/casebook-dev/casebook/internal/keys"
)

// Kind says what a backend really is, so callers can refuse a fallback.
type Kind string

const (
	External  Kind = "external"  // a server the caller named
	Spawned   Kind = "spawned"   // a real server process this package started
	Miniredis Kind = "miniredis" // in-process Redis emulation (fallback)
	SQLite    Kind = "sqlite"    // in-process SQLite (fallback for MySQL)
	KFake     Kind = "kfake"     // in-process Kafka cluster (real protocol)
)

// Fallback reports whether k stands in for the real server rather than being
// one.
func (k Kind) Fallback() bool { return k == Miniredis || k == SQLite }

// Redis is an open Redis backend.
type Redis struct {
	Client redis.UniversalClient
	Kind   Kind
	Addrs  []string
	// Server is the spawned standalone process, nil otherwise (tests restart
	// it to inject faults).
	Server  *RedisServer
	closers []func() error
}

// Close closes the client and stops what was spawned.
func (r *Redis) Close() error { return closeAll(r.closers) }

// OpenRedis connects to addr, or when addr is empty starts a redis-server
// (or, without the binary, miniredis).
func OpenRedis(ctx context.Context, addr string) (*Redis, error) {
	if addr != "" {
		c := redis.NewClient(&redis.Options{Addr: addr})
		if err := c.Ping(ctx).Err(); err != nil {
			c.Close()
			return nil, fmt.Errorf("devstack: redis %s: %w", addr, err)
		}
		return &Redis{Client: c, Kind: External, Addrs: []string{addr}, closers: []func() error{c.Close}}, nil
	}
	if HaveRedisServer() {
		s, err := StartRedisServer(ctx)
		if err != nil {
			return nil, err
		}
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		return &Redis{Client: c, Kind: Spawned, Addrs: []string{s.Addr}, Server: s, closers: []func() error{c.Close, s.Close}}, nil
	}
	m, err := miniredis.Run()
	if err != nil {
		return nil, fmt.Errorf("devstack: miniredis: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return &Redis{Client: c, Kind: Miniredis, Addrs: []string{m.Addr()}, closers: []func() error{c.Close, func() error { m.Close(); return nil }}}, nil
}

// OpenRedisCluster connects to the cluster that addrs belong to, or when
// addrs is empty spawns a six-node cluster (ErrNoRedisServer without the
// binary).
func OpenRedisCluster(ctx context.Context, addrs []string) (*Redis, error) {
	r := &Redis{Kind: External, Addrs: addrs}
	if len(addrs) == 0 {
		rc, err := StartRedisCluster(ctx)
		if err != nil {
			return nil, err
		}
		r.Kind, r.Addrs = Spawned, rc.Addrs()
		r.closers = append(r.closers, rc.Close)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.Addrs})
	r.Client = c
	r.closers = append([]func() error{c.Close}, r.closers...)
	// Touch every master so a wrong address fails here, not in a test.
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.Ping(ctx).Err()
	}); err != nil {
		r.Close()
		return nil, fmt.Errorf("devstack: redis cluster %v: %w", addrs, err)
	}
	return r, nil
}

// SQL is an open SQL database: a scratch database on the named MySQL/MariaDB
// server, or a SQLite file.
type SQL struct {
	DB     *sqlx.DB
	Kind   Kind
	Name   string // database name (MySQL) or file path (SQLite)
	closer func() error
}

// Close closes the pool and drops the scratch database or removes the file.
func (s *SQL) Close() error { return s.closer() }

// OpenSQL creates a fresh database named "<prefix>_<random>" on the
// MySQL/MariaDB server of dsn (the DSN's own database name is ignored), or
// when dsn is empty a SQLite file in a temporary directory.
func OpenSQL(ctx context.Context, dsn, prefix string) (*SQL, error) {
	name := prefix + "_" + RandomHex(6)
	if dsn == "" {
		return openSQLite(name)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("devstack: mysql dsn: %w", err)
	}
	cfg.DBName = ""
	cfg.ParseTime = true
	admin, err := sqlx.ConnectContext(ctx, "mysql", cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("devstack: mysql: %w", err)
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		admin.Close()
		return nil, fmt.Errorf("devstack: create database %s: %w", name, err)
	}
	cfg.DBName = name
	db, err := sqlx.ConnectContext(ctx, "mysql", cfg.FormatDSN())
	if err != nil {
		admin.ExecContext(ctx, "DROP DATABASE `"+name+"`")
		admin.Close()
		return nil, fmt.Errorf("devstack: mysql %s: %w", name, err)
	}
	// 16 per database: a sharded test opens 8 of them, and MariaDB's default
	// max_connections is 151 for everything on the server.
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	drop := func() error {
		db.Close()
		_, err := admin.Exec("DROP DATABASE IF EXISTS `" + name + "`")
		admin.Close()
		return err
	}
	return &SQL{DB: db, Kind: External, Name: name, closer: drop}, nil
}

func openSQLite(name string) (*SQL, error) {
	dir, err := tempDir("sqlite")
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
	return &SQL{DB: db, Kind: SQLite, Name: path, closer: remove}, nil
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
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// RandomHex returns 2n random hex digits, for unique scratch names.
func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func closeAll(fs []func() error) error {
	var first error
	for _, f := range fs {
		if err := f(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// DeleteKeys unlinks every key matching pattern, on every master of a
// cluster. Keys are unlinked one per command so keys of different slots never
// meet in one call.
func DeleteKeys(ctx context.Context, c redis.UniversalClient, pattern string) error {
	del := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		pipe := node.Pipeline()
		for iter.Next(ctx) {
			pipe.Unlink(ctx, iter.Val())
			if pipe.Len() >= 1000 {
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	if err := keys.EachPrimary(ctx, c, del); err != nil {
		return fmt.Errorf("devstack: delete %s: %w", pattern, err)
	}
	return nil
}
