package devcore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

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

// NewSQL wraps db; Close calls closer.
func NewSQL(db *sqlx.DB, kind Kind, name string, closer func() error) *SQL {
	return &SQL{DB: db, Kind: kind, Name: name, closer: closer}
}

// OpenMySQL creates a fresh database named "<prefix>_<random>" on the
// MySQL/MariaDB server of dsn (the DSN's own database name is ignored);
// Close drops it.
func OpenMySQL(ctx context.Context, dsn, prefix string) (*SQL, error) {
	name := prefix + "_" + RandomHex(6)
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

// OpenNamedMySQL uses the DSN's database, creating it if missing; Close
// keeps it.
func OpenNamedMySQL(ctx context.Context, cfg *mysql.Config) (*SQL, error) {
	name := cfg.DBName
	cfg.DBName = ""
	admin, err := sqlx.ConnectContext(ctx, "mysql", cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("devstack: mysql: %w", err)
	}
	_, err = admin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	admin.Close()
	if err != nil {
		return nil, fmt.Errorf("devstack: create database %s: %w", name, err)
	}
	cfg.DBName = name
	cfg.ParseTime = true
	db, err := sqlx.ConnectContext(ctx, "mysql", cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("devstack: mysql %s: %w", name, err)
	}
	return NewSQL(db, External, name, db.Close), nil
}

// OpenAnyRedis opens the Redis Cluster of cluster, else the Redis at addr,
// else a spawned six-node cluster, else (no redis-server binary) one
// embedded Redis, said on w.
func OpenAnyRedis(ctx context.Context, cluster []string, addr string, w io.Writer) (*Redis, error) {
	if len(cluster) > 0 {
		return OpenRedisCluster(ctx, cluster)
	}
	if addr != "" {
		return OpenRedis(ctx, addr)
	}
	r, err := OpenRedisCluster(ctx, nil)
	if errors.Is(err, ErrNoRedisServer) {
		fmt.Fprintln(w, "note: no redis-server binary, so no local Redis Cluster; using one embedded Redis instead")
		return OpenRedis(ctx, "")
	}
	return r, err
}

// ErrNoSQL is OpenSQLs' answer when no MySQL DSN is named and the program
// links no embedded SQL database.
var ErrNoSQL = errors.New("devstack: no MySQL/MariaDB DSN named and no embedded SQL database linked")

// OpenSQLs opens n databases for a sharded program: on dsn's MySQL, the
// DSN's database name with suffixes _0 … _n-1 (created if missing and kept),
// or scratch databases name_<random> when the DSN names none; with dsn empty,
// n databases from embedded (ErrNoSQL when it is nil). A failure closes the
// ones already opened.
func OpenSQLs(ctx context.Context, dsn, name string, n int, embedded func(name string) (*SQL, error)) ([]*SQL, error) {
	out := make([]*SQL, 0, n)
	fail := func(err error) ([]*SQL, error) {
		for _, s := range out {
			s.Close()
		}
		return nil, err
	}
	var cfg *mysql.Config
	if dsn != "" {
		var err error
		if cfg, err = mysql.ParseDSN(dsn); err != nil {
			return nil, fmt.Errorf("devstack: mysql dsn: %w", err)
		}
	} else if embedded == nil {
		return nil, ErrNoSQL
	}
	for i := range n {
		var s *SQL
		var err error
		switch {
		case cfg != nil && cfg.DBName != "":
			c := cfg.Clone()
			c.DBName = fmt.Sprintf("%s_%d", cfg.DBName, i)
			s, err = OpenNamedMySQL(ctx, c)
		case cfg != nil:
			s, err = OpenMySQL(ctx, dsn, name)
		default:
			s, err = embedded(name)
		}
		if err != nil {
			return fail(err)
		}
		out = append(out, s)
	}
	return out, nil
}

// TempDir creates a directory for what this process is about to start,
// swept by the next process once this one is gone.
func TempDir(what string) (string, error) { return tempDir(what) }

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
