// Package testenv gives every casebook test the backends its users run.
//
// Each package's tests call Main from TestMain; tests then ask for Redis,
// RedisCluster, SQL or Kafka. What they get is chosen from the environment:
//
//	CASEBOOK_REDIS_ADDR     host:port of a real Redis         else a spawned redis-server, else miniredis
//	CASEBOOK_REDIS_CLUSTER  host:port,… of a Redis Cluster     else six spawned nodes, else a skip
//	CASEBOOK_MYSQL_DSN      a MySQL/MariaDB DSN                else SQLite (modernc.org/sqlite)
//	CASEBOOK_KAFKA_BROKERS  host:port,… of Kafka brokers       else a three-broker kfake cluster
//	CASEBOOK_REQUIRE_REAL=1 every fallback (miniredis, SQLite, a skipped cluster) fails the test
//
// Servers are spawned at most once per test binary and stopped by Main. Each
// test gets its own key namespace (deleted by t.Cleanup) and its own SQL
// database (dropped by t.Cleanup); nothing here ever flushes a server.
package testenv

import (
	"context"
	"errors"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/kafka"
)

// Environment variables read by this package (and by the benchmark harness).
const (
	EnvRedisAddr    = devstack.EnvRedisAddr
	EnvRedisCluster = devstack.EnvRedisCluster
	EnvMySQLDSN     = devstack.EnvMySQLDSN
	EnvKafkaBrokers = devstack.EnvKafkaBrokers
	EnvRequireReal  = "CASEBOOK_REQUIRE_REAL"
)

// shared holds what is spawned once per test binary.
var shared struct {
	mu      sync.Mutex
	main    bool
	redis   lazy[*devstack.Redis]
	cluster lazy[*devstack.Redis]
	kafka   lazy[*devstack.Kafka]
}

type lazy[T interface{ Close() error }] struct {
	once sync.Once
	v    T
	err  error
}

func (l *lazy[T]) get(open func() (T, error)) (T, error) {
	l.once.Do(func() { l.v, l.err = open() })
	return l.v, l.err
}

func (l *lazy[T]) close() {
	opened := true
	l.once.Do(func() { opened = false }) // never opened: nothing to stop
	if opened && l.err == nil {
		l.v.Close()
	}
}

// Main runs the tests of a package and then stops every server they spawned.
// Call it from TestMain: func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) {
	if spec := os.Getenv(envLoadGen); spec != "" { // started by NewLoadGen
		os.Exit(runLoadGen(spec))
	}
	shared.mu.Lock()
	shared.main = true
	shared.mu.Unlock()
	code := m.Run()
	shared.redis.close()
	shared.cluster.close()
	shared.kafka.close()
	os.Exit(code)
}

// RequireReal reports whether CASEBOOK_REQUIRE_REAL asks for real servers only.
func RequireReal() bool { return os.Getenv(EnvRequireReal) == "1" }

func checkMain(t testing.TB) {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.main {
		t.Fatal("testenv: call testenv.Main(m) from this package's TestMain so spawned servers are stopped")
	}
}

func refuseFallback(t testing.TB, what string, k devstack.Kind) {
	t.Helper()
	if k.Fallback() && RequireReal() {
		t.Fatalf("testenv: %s is %s, a fallback, but %s=1 (set %s to a real server)", what, k, EnvRequireReal, envFor(what))
	}
}

func envFor(what string) string {
	switch what {
	case "redis":
		return EnvRedisAddr
	case "sql":
		return EnvMySQLDSN
	}
	return EnvRedisCluster
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// Redis is a Redis backend handed to one test.
type Redis struct {
	Client redis.UniversalClient
	// Namespace is unique to the test: build every key under it (blocks take
	// it as their key prefix). Keys starting with it are deleted at cleanup.
	Namespace string
	Kind      devstack.Kind
}

// NeedsServer skips t on miniredis with "needs redis-server: " and why: for
// a test of behaviour the emulation does not have, so that it cannot mean
// anything there (CI's summary of skips lists them). On a real or spawned
// server it does nothing.
func (r *Redis) NeedsServer(t testing.TB, why string) {
	t.Helper()
	if r.Kind == devstack.Miniredis {
		t.Skip("needs redis-server: " + why)
	}
}

// NewRedis returns the standalone Redis for this test binary.
func NewRedis(t testing.TB) *Redis {
	t.Helper()
	checkMain(t)
	r, err := shared.redis.get(func() (*devstack.Redis, error) {
		return devstack.OpenRedis(context.Background(), os.Getenv(EnvRedisAddr))
	})
	if err != nil {
		t.Fatalf("testenv: redis: %v", err)
	}
	refuseFallback(t, "redis", r.Kind)
	return forTest(t, r)
}

// NewRedisCluster returns the Redis Cluster for this test binary. Without a
// redis-server binary and CASEBOOK_REDIS_CLUSTER the test is skipped (failed
// under CASEBOOK_REQUIRE_REAL).
func NewRedisCluster(t testing.TB) *Redis {
	t.Helper()
	checkMain(t)
	r, err := shared.cluster.get(func() (*devstack.Redis, error) {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return devstack.OpenRedisCluster(c, devstack.SplitList(os.Getenv(EnvRedisCluster)))
	})
	if errors.Is(err, devstack.ErrNoRedisServer) && !RequireReal() {
		t.Skipf("testenv: no Redis Cluster: set %s or install redis-server", EnvRedisCluster)
	}
	if err != nil {
		t.Fatalf("testenv: redis cluster: %v", err)
	}
	return forTest(t, r)
}

// EachRedis runs f as two subtests, "redis" on the standalone server and
// "cluster" on the Redis Cluster, each opening its backend inside the
// subtest: where there is no cluster only the cluster subtest skips.
func EachRedis(t *testing.T, f func(t *testing.T, r *Redis)) {
	t.Run("redis", func(t *testing.T) { f(t, NewRedis(t)) })
	t.Run("cluster", func(t *testing.T) { f(t, NewRedisCluster(t)) })
}

// NewPrivateRedis spawns a redis-server for this test alone, with extra
// arguments (such as "--appendonly", "yes"), stopped at cleanup. Tests that
// restart or kill a server use it; it needs the binary (skip otherwise, fail
// under CASEBOOK_REQUIRE_REAL).
func NewPrivateRedis(t testing.TB, extra ...string) (*Redis, *devstack.RedisServer) {
	t.Helper()
	if !devstack.HaveRedisServer() && !RequireReal() {
		t.Skip("testenv: this test restarts a server and needs the redis-server binary")
	}
	s, err := devstack.StartRedisServer(ctx(t), extra...)
	if err != nil {
		t.Fatalf("testenv: private redis: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { c.Close() })
	return &Redis{Client: c, Namespace: namespace(t), Kind: devstack.Spawned}, s
}

func forTest(t testing.TB, r *devstack.Redis) *Redis {
	tr := &Redis{Client: r.Client, Namespace: namespace(t), Kind: r.Kind}
	t.Cleanup(func() {
		if err := DeleteKeys(context.Background(), r.Client, tr.Namespace+"*"); err != nil {
			t.Errorf("testenv: clean up %s*: %v", tr.Namespace, err)
		}
	})
	return tr
}

var unsafeKeyChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// namespace is "cbt:<test name>:<random>", free of glob characters so that it
// can be used as a SCAN pattern.
func namespace(t testing.TB) string {
	name := unsafeKeyChars.ReplaceAllString(t.Name(), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	return "cbt:" + name + ":" + devstack.RandomHex(4)
}

// DeleteKeys unlinks every key matching pattern; see devstack.DeleteKeys.
func DeleteKeys(ctx context.Context, c redis.UniversalClient, pattern string) error {
	return devstack.DeleteKeys(ctx, c, pattern)
}

// NewSQL returns a fresh, empty database for this test, dropped at cleanup.
func NewSQL(t testing.TB) *sqlx.DB {
	t.Helper()
	return NewSQLs(t, 1)[0]
}

// NewSQLs returns n fresh databases (on one server) for a sharded test.
func NewSQLs(t testing.TB, n int) []*sqlx.DB {
	t.Helper()
	dbs := make([]*sqlx.DB, n)
	for i, s := range openSQLs(t, n) {
		dbs[i] = s.DB
	}
	return dbs
}

func openSQLs(t testing.TB, n int) []*devstack.SQL {
	t.Helper()
	checkMain(t)
	dbs := make([]*devstack.SQL, n)
	for i := range dbs {
		s, err := devstack.OpenSQL(ctx(t), os.Getenv(EnvMySQLDSN), "cbt")
		if err != nil {
			t.Fatalf("testenv: sql: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("testenv: drop %s: %v", s.Name, err)
			}
		})
		refuseFallback(t, "sql", s.Kind)
		dbs[i] = s
	}
	return dbs
}

// Kafka returns the brokers for this test binary.
func Kafka(t testing.TB) []string {
	t.Helper()
	checkMain(t)
	k, err := shared.kafka.get(func() (*devstack.Kafka, error) {
		return devstack.OpenKafka(devstack.SplitList(os.Getenv(EnvKafkaBrokers)))
	})
	if err != nil {
		t.Fatalf("testenv: kafka: %v", err)
	}
	return k.Brokers
}

// Topic creates a topic unique to this test with the given partitions and
// deletes it at cleanup.
func Topic(t testing.TB, partitions int32) string {
	t.Helper()
	brokers := Kafka(t)
	name := "cbt." + unsafeKeyChars.ReplaceAllString(t.Name(), "_") + "." + devstack.RandomHex(4)
	if err := kafka.CreateTopic(brokers, name, partitions); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if err := kafka.DeleteTopic(brokers, name); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return name
}
