package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/devcore"
)

// Environment variables that name real servers.
const (
	EnvRedisAddr    = "CASEBOOK_REDIS_ADDR"
	EnvRedisCluster = "CASEBOOK_REDIS_CLUSTER"
	EnvMySQLDSN     = "CASEBOOK_MYSQL_DSN"
	EnvKafkaBrokers = "CASEBOOK_KAFKA_BROKERS"
)

// Env names the servers a program should use; empty fields get embedded
// stand-ins.
type Env struct {
	RedisAddr    string   // one Redis, host:port
	RedisCluster []string // Redis Cluster nodes; wins over RedisAddr
	// MySQLDSN is a go-sql-driver DSN. Naming a database
	// ("user@tcp(host:3306)/links") uses that database, created if missing
	// and kept; naming none ("user@tcp(host:3306)/") creates a scratch
	// database that Close drops.
	MySQLDSN     string
	KafkaBrokers []string
}

// FromEnv reads CASEBOOK_REDIS_ADDR, CASEBOOK_REDIS_CLUSTER,
// CASEBOOK_MYSQL_DSN and CASEBOOK_KAFKA_BROKERS (lists comma-separated).
func FromEnv() Env {
	return Env{
		RedisAddr:    os.Getenv(EnvRedisAddr),
		RedisCluster: SplitList(os.Getenv(EnvRedisCluster)),
		MySQLDSN:     os.Getenv(EnvMySQLDSN),
		KafkaBrokers: SplitList(os.Getenv(EnvKafkaBrokers)),
	}
}

// Stack is the set of backends a program runs on.
type Stack struct {
	Redis *Redis
	Kafka *Kafka
	SQL   *SQL   // Open's one database
	SQLs  []*SQL // OpenSharded's databases
}

// DBs returns the pools of OpenSharded's databases, in order.
func (s *Stack) DBs() []*sqlx.DB {
	dbs := make([]*sqlx.DB, len(s.SQLs))
	for i, q := range s.SQLs {
		dbs[i] = q.DB
	}
	return dbs
}

// OpenSharded is Open with n databases (see Env.OpenSQLs) instead of one,
// for the blocks that shard over several.
func OpenSharded(ctx context.Context, env Env, name string, n int, w io.Writer) (*Stack, error) {
	s := &Stack{}
	var err error
	if s.Redis, err = env.OpenRedis(ctx, w); err != nil {
		return nil, err
	}
	if s.Kafka, err = OpenKafka(env.KafkaBrokers); err != nil {
		s.Close()
		return nil, err
	}
	if s.SQLs, err = env.OpenSQLs(ctx, name, n); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Open opens what env names and embedded stand-ins for the rest: Redis is
// env's cluster, else env's single node, else a spawned six-node cluster,
// else (no redis-server binary) one embedded Redis, said on w; SQL is
// env's MySQL (see Env.MySQLDSN) or a SQLite file in a directory of this
// run; Kafka is env's brokers or an in-process kfake cluster. name labels
// scratch databases and files.
func Open(ctx context.Context, env Env, name string, w io.Writer) (*Stack, error) {
	s := &Stack{}
	var err error
	if s.Redis, err = env.OpenRedis(ctx, w); err != nil {
		return nil, err
	}
	if s.Kafka, err = OpenKafka(env.KafkaBrokers); err != nil {
		s.Close()
		return nil, err
	}
	if s.SQL, err = env.OpenSQL(ctx, name); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// OpenRedis opens env's Redis Cluster, else env's single Redis, else a
// spawned six-node cluster, else (no redis-server binary) one embedded
// Redis, said on w.
func (env Env) OpenRedis(ctx context.Context, w io.Writer) (*Redis, error) {
	return devcore.OpenAnyRedis(ctx, env.RedisCluster, env.RedisAddr, w)
}

// OpenSQL opens env's MySQL (see Env.MySQLDSN; a scratch database is named
// name_<random>), else a SQLite file in a directory of this run.
func (env Env) OpenSQL(ctx context.Context, name string) (*SQL, error) {
	dsn := env.MySQLDSN
	if dsn == "" {
		return OpenSQL(ctx, "", name)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("devstack: mysql dsn: %w", err)
	}
	if cfg.DBName == "" {
		return OpenSQL(ctx, dsn, name)
	}
	return devcore.OpenNamedMySQL(ctx, cfg)
}

// OpenSQLs opens n databases for a sharded program: on env's MySQL, the
// DSN's database name with suffixes _0 … _n-1 (created if missing and kept),
// or scratch databases name_<random> when the DSN names none; else n SQLite
// files in a directory of this run. Close each; a failure closes the ones
// already opened.
func (env Env) OpenSQLs(ctx context.Context, name string, n int) ([]*SQL, error) {
	return devcore.OpenSQLs(ctx, env.MySQLDSN, name, n, func(name string) (*SQL, error) { return OpenSQL(ctx, "", name) })
}

// Close closes whatever was opened, stopping what was spawned and removing
// scratch databases and files.
func (s *Stack) Close() error {
	var errs []error
	if s.SQL != nil {
		errs = append(errs, s.SQL.Close())
	}
	for _, q := range s.SQLs {
		errs = append(errs, q.Close())
	}
	if s.Kafka != nil {
		errs = append(errs, s.Kafka.Close())
	}
	if s.Redis != nil {
		errs = append(errs, s.Redis.Close())
	}
	return errors.Join(errs...)
}

// Run runs a program's body so that it always cleans up: SIGINT and SIGTERM
// cancel ctx (the body returns and its defers run), a closed stdout pipe
// becomes a write error instead of killing the process, and an error from
// the body is printed and exits with status 1 — after its defers ran, unlike
// log.Fatal inside it.
func Run(body func(ctx context.Context) error) {
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := body(ctx)
	stop()
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Print(err)
		os.Exit(1)
	}
}

// Scratch is a throw-away place to try a block: one Redis (CASEBOOK_REDIS_ADDR,
// else spawned, else embedded), a key namespace of its own, and a scratch
// SQL database (on CASEBOOK_MYSQL_DSN's server, else SQLite). Close removes
// all of it. The packages' Example functions run on one.
type Scratch struct {
	Redis     redis.UniversalClient
	SQL       *sqlx.DB
	Namespace string // unique; every key the example writes goes under it
	redis     *Redis
	sql       *SQL
}

// OpenScratch opens a Scratch; name labels its database.
func OpenScratch(ctx context.Context, name string) (*Scratch, error) {
	r, err := OpenRedis(ctx, os.Getenv(EnvRedisAddr))
	if err != nil {
		return nil, err
	}
	s, err := OpenSQL(ctx, os.Getenv(EnvMySQLDSN), name)
	if err != nil {
		r.Close()
		return nil, err
	}
	return &Scratch{Redis: r.Client, SQL: s.DB, Namespace: name + ":" + RandomHex(4), redis: r, sql: s}, nil
}

// Close deletes the namespace's keys, drops the database and stops what was
// spawned.
func (s *Scratch) Close() error {
	return errors.Join(DeleteKeys(context.Background(), s.Redis, s.Namespace+"*"), s.sql.Close(), s.redis.Close())
}
