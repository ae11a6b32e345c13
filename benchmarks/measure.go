package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/go-sql-driver/mysql"

	"github.com/casebook-dev/casebook/internal/devcore"
	"github.com/casebook-dev/casebook/internal/redisinfo"
)

// Measurement is one throughput measurement of a block (or of a raw backend
// call, as the baseline the blocks are compared with).
type Measurement struct {
	Name string
	Unit string // what one operation is: "ids", "resolves", "SETs"
	// Baseline names an earlier measurement this one is compared with.
	Baseline string
	// SQLBound: the operation's cost is SQL's, so a measurement on SQLite
	// stands in for MySQL no better than miniredis does for Redis. (Other
	// measurements may use SQL to set up, off the measured path.)
	SQLBound bool
	// Tier is what the sizing buys more of to serve more of this operation.
	Tier Tier
	// Setup prepares the operation on env's backends.
	Setup func(ctx context.Context, env *Env) (Prepared, error)
}

// Tier is the kind of machine a measured operation is bound by.
type Tier string

const (
	TierApp   Tier = "app"   // stateless nodes: in-process work, HTTP handlers
	TierRedis Tier = "redis" // Redis primaries, each with its replicas
	TierMySQL Tier = "mysql" // MySQL primaries, each with its replicas
)

// Prepared is a measurement ready to run.
type Prepared struct {
	Op      func() error // one operation
	Workers int          // goroutines calling Op; 0 means one per core
	Backend string       // what it runs on, for the report
	Cleanup func()       // may be nil
	// Batch is how many of the measurement's units one Op does [1]: an Op
	// that writes 32 orders counts 32.
	Batch int
	// Namespace is the key prefix of what the run stores (onRedis).
	Namespace string
	// Footprint, when set, samples after the run what it stored (see
	// withFootprint); may be nil.
	Footprint func(ctx context.Context) (Footprint, error)
	// ServerCPU, when set, reads the CPU time the server has spent so far;
	// Run then also reports the units per second of that time
	// (Result.ServerPerSec). When nil, Run reads the server of the
	// measurement's tier (see servercpu.go).
	ServerCPU func(ctx context.Context) (time.Duration, error)
}

// Result is a measurement's outcome.
type Result struct {
	Name     string  `json:"name"`
	Unit     string  `json:"unit"`
	Baseline string  `json:"baseline,omitempty"`
	Backend  string  `json:"backend"`
	Tier     Tier    `json:"tier"`
	PerSec   float64 `json:"per_sec"`
	// ServerPerSec is units per second of the server's CPU time: what one
	// server core could serve with its clients elsewhere, where PerSec is
	// what this machine served with the clients beside the server. Absent
	// unless the measurement reads the server's CPU time.
	ServerPerSec float64 `json:"server_per_sec,omitempty"`
	// ServerCPU says how the server's CPU time was read, or why it could
	// not be (then the sizing uses PerSec); empty for in-process work.
	ServerCPU string `json:"server_cpu,omitempty"`
	// Workers is the concurrency it ran under; Batch the units one op does.
	Workers int `json:"workers"`
	Batch   int `json:"batch,omitempty"`
	// Latency is per op (a batch's, when Batch > 1), absent when none completed.
	Latency *Latency `json:"latency_us,omitempty"`
	// Distribution is Latency's whole percentile curve, for the HTML report.
	Distribution []LatencyPoint `json:"-"`
	// Fallback: it ran on an embedded stand-in (miniredis, SQLite), whose
	// figures say nothing about a real server.
	Fallback bool   `json:"embedded_fallback,omitempty"`
	Err      string `json:"error,omitempty"`
	// NotRun says why the measurement did not run when a backend it needs
	// is absent by design (no SQL in the default binary, see sql.go): not
	// a failure; its loads are sized from the reference profile.
	NotRun string `json:"not_run,omitempty"`
	// Footprint is the size of what the run stored, when it samples it.
	Footprint    *Footprint `json:"footprint,omitempty"`
	FootprintErr string     `json:"footprint_error,omitempty"`
}

// Env holds the backends the measurements run on, opened on first use.
type Env struct {
	RedisAddr string // "" → embedded
	MySQLDSN  string // "" → SQLite

	redisOnce sync.Once
	redis     *devcore.Redis
	redisErr  error
	sqlOnce   sync.Once
	sql       *devcore.SQL
	sqlErr    error
	sqlsOnce  sync.Once
	sqls      []*devcore.SQL
	sqlsErr   error

	// redisFell and sqlFell record whether the measurement being set up
	// touched an embedded stand-in (miniredis, SQLite) for that backend.
	redisFell, sqlFell bool

	mu       sync.Mutex
	fixtures map[string]fixture
}

type fixture struct {
	v     any
	close func()
}

// Fixture returns the value build made for key, building it on first use, so
// that several measurements can share one set-up (seeded tables, a service).
// Its close runs at Env.Close.
func (e *Env) Fixture(key string, build func() (any, func(), error)) (any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if f, ok := e.fixtures[key]; ok {
		return f.v, nil
	}
	v, closeFn, err := build()
	if err != nil {
		return nil, err
	}
	if e.fixtures == nil {
		e.fixtures = map[string]fixture{}
	}
	e.fixtures[key] = fixture{v: v, close: closeFn}
	return v, nil
}

// Redis returns the Redis backend, opening it on first use.
func (e *Env) Redis(ctx context.Context) (*devcore.Redis, error) {
	e.redisOnce.Do(func() { e.redis, e.redisErr = devcore.OpenRedis(ctx, e.RedisAddr) })
	e.redisFell = e.redisFell || e.redis != nil && e.redis.Kind.Fallback()
	return e.redis, e.redisErr
}

// SQL returns a scratch SQL database, opening it on first use.
func (e *Env) SQL(ctx context.Context) (*devcore.SQL, error) {
	e.sqlOnce.Do(func() { e.sql, e.sqlErr = openSQL(ctx, e.MySQLDSN, "casebook_bench") })
	e.sqlFell = e.sqlFell || e.sql != nil && e.sql.Kind.Fallback()
	return e.sql, e.sqlErr
}

// SQLs returns 8 scratch SQL databases for sharded measurements, opening
// them on first use.
func (e *Env) SQLs(ctx context.Context) ([]*devcore.SQL, error) {
	e.sqlsOnce.Do(func() { e.sqls, e.sqlsErr = devcore.OpenSQLs(ctx, e.MySQLDSN, "casebook_bench", 8, embeddedSQL) })
	e.sqlFell = e.sqlFell || len(e.sqls) > 0 && e.sqls[0].Kind.Fallback()
	return e.sqls, e.sqlsErr
}

// Opened opens Redis and SQL and names what they are, for the run's first
// line: "Redis: spawned redis-server 7.0.15 on 127.0.0.1:40123; SQL: SQLite
// file /tmp/…/casebook_bench_1a2b3c.db; Kafka: none (no measurement uses
// it)". A backend that fails to open is named with its error; the
// measurements that need it fail with the same.
func (e *Env) Opened(ctx context.Context) string {
	redisText := "in-process miniredis"
	r, err := e.Redis(ctx)
	switch {
	case err != nil:
		redisText = "none (" + err.Error() + ")"
	case r.Kind == devcore.Miniredis:
		redisText = "in-process miniredis on " + r.Addrs[0] + " (no redis-server on PATH)"
	default:
		version, _ := e.redisVersion(ctx)
		redisText = strings.TrimSpace(map[devcore.Kind]string{devcore.Spawned: "spawned redis-server", devcore.External: "Redis"}[r.Kind] +
			" " + version + " on " + strings.Join(r.Addrs, ","))
	}
	sqlText := ""
	switch s, err := e.SQL(ctx); {
	case errors.Is(err, devcore.ErrNoSQL):
		sqlText = "none (name one with -mysql or CASEBOOK_MYSQL_DSN, or build with -tags casebook_sqlite for SQLite; loads that need SQL are sized from the reference profile)"
	case err != nil:
		sqlText = "none (" + err.Error() + ")"
	case s.Kind == devcore.SQLite:
		sqlText = "SQLite file " + s.Name
	default:
		version, _ := e.sqlVersion(ctx)
		host := "?"
		if cfg, err := mysql.ParseDSN(e.MySQLDSN); err == nil {
			host = cfg.Addr
		}
		sqlText = fmt.Sprintf("%s on %s, scratch databases casebook_bench_*", sqlProduct(version), host)
	}
	return "Redis: " + redisText + "; SQL: " + sqlText + "; Kafka: none (no measurement uses it)"
}

// redisVersion is the Redis server's redis_version (INFO server).
func (e *Env) redisVersion(ctx context.Context) (string, error) {
	r, err := e.Redis(ctx)
	if err != nil {
		return "", err
	}
	info, err := r.Client.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	if v, ok := redisinfo.Field(info, "redis_version"); ok {
		return v, nil
	}
	return "", fmt.Errorf("INFO server has no redis_version")
}

// sqlVersion is the SQL server's SELECT VERSION().
func (e *Env) sqlVersion(ctx context.Context) (string, error) {
	s, err := e.SQL(ctx)
	if err != nil {
		return "", err
	}
	var v string
	err = s.DB.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v)
	return v, err
}

// Close stops and drops what the measurements opened.
func (e *Env) Close() {
	for _, f := range e.fixtures {
		f.close()
	}
	if e.redis != nil {
		e.redis.Close()
	}
	if e.sql != nil {
		e.sql.Close()
	}
	for _, s := range e.sqls {
		s.Close()
	}
}

// Run performs m for about d and reports operations per second. progress is
// called with the elapsed fraction. workers > 0 overrides the concurrency
// the measurement states.
func (m Measurement) Run(ctx context.Context, env *Env, d time.Duration, workers int, progress func(float64)) Result {
	res := Result{Name: m.Name, Unit: m.Unit, Baseline: m.Baseline, Tier: m.Tier}
	env.redisFell, env.sqlFell = false, false
	p, err := m.Setup(ctx, env)
	res.Fallback = env.redisFell || m.SQLBound && env.sqlFell
	if errors.Is(err, devcore.ErrNoSQL) {
		res.Fallback, res.Backend, res.NotRun = true, "none", noSQL
		return res
	}
	if err != nil {
		res.Err = err.Error()
		return res
	}
	if p.Cleanup != nil {
		defer p.Cleanup()
	}
	if workers > 0 {
		p.Workers = workers
	}
	if p.Workers <= 0 {
		p.Workers = runtime.GOMAXPROCS(0)
	}
	res.Backend, res.Workers = p.Backend, p.Workers
	if p.Batch > 1 {
		res.Batch = p.Batch
	}
	if p.ServerCPU == nil {
		p.ServerCPU, res.ServerCPU = env.serverCPUOf(ctx, m.Tier)
	}
	var hist *hdrhistogram.Histogram
	cpu := serverCPU(ctx, p)
	start := time.Now()
	res.PerSec, hist, err = rate(ctx, d, p.Workers, p.Op, progress)
	elapsed := time.Since(start)
	res.PerSec *= float64(max(p.Batch, 1))
	switch busy := cpu(); {
	case busy >= minServerCPU:
		res.ServerPerSec = res.PerSec * elapsed.Seconds() / busy.Seconds()
	case p.ServerCPU != nil && err == nil:
		res.ServerCPU = fmt.Sprintf("server CPU too small to size by (%v spent, under %v): run longer", busy, minServerCPU)
	}
	res.Latency, res.Distribution = summarise(hist), distribution(hist)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	if p.Footprint != nil {
		if f, err := p.Footprint(ctx); err != nil {
			res.FootprintErr = err.Error()
		} else {
			res.Footprint = &f
		}
	}
	return res
}

// minServerCPU is the least server CPU time a run must show for its
// operations per server core to be read from it: /proc counts in 10 ms
// ticks.
const minServerCPU = 100 * time.Millisecond

// serverCPU starts reading p's server CPU time: the function it returns
// gives the time spent since, or 0 where it cannot tell.
func serverCPU(ctx context.Context, p Prepared) func() time.Duration {
	if p.ServerCPU == nil {
		return func() time.Duration { return 0 }
	}
	before, err := p.ServerCPU(ctx)
	return func() time.Duration {
		after, err2 := p.ServerCPU(ctx)
		if err != nil || err2 != nil {
			return 0
		}
		return max(0, after-before)
	}
}

// rate calls op from workers goroutines for d and returns completed calls per
// second and their latencies (see opTimer). The first error stops every
// worker.
func rate(ctx context.Context, d time.Duration, workers int, op func() error, progress func(float64)) (float64, *hdrhistogram.Histogram, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		done    atomic.Int64
		stop    atomic.Bool
		errOnce sync.Once
		runErr  error
		wg      sync.WaitGroup
	)
	timers := make([]*opTimer, workers)
	for i := range timers {
		timers[i] = newOpTimer()
	}
	start := time.Now()
	for _, timer := range timers {
		wg.Go(func() {
			n := int64(0) // counted locally, added rarely: ops can take nanoseconds
			defer func() { done.Add(n) }()
			for !stop.Load() {
				var err error
				if timer.untimed() {
					err = op()
				} else {
					err = timer.timed(op)
				}
				if err != nil {
					errOnce.Do(func() { runErr = err })
					stop.Store(true)
					return
				}
				if n++; n == 64 {
					done.Add(n)
					n = 0
				}
			}
		})
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(d)
wait:
	for {
		select {
		case <-tick.C:
			if progress != nil {
				progress(min(1, float64(time.Since(start))/float64(d)))
			}
		case <-deadline:
			break wait
		case <-ctx.Done():
			break wait
		}
		if stop.Load() {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	hist := newLatencyHistogram()
	for _, t := range timers {
		hist.Merge(t.hist)
	}
	if runErr != nil {
		return 0, hist, runErr
	}
	if err := ctx.Err(); err != nil {
		return 0, hist, err
	}
	return float64(done.Load()) / elapsed.Seconds(), hist, nil
}

// describeRedis names a Redis backend for the report: a server the user
// named keeps its address; a spawned or embedded one's port is throw-away.
func describeRedis(r *devcore.Redis) string {
	switch r.Kind {
	case devcore.External:
		return "Redis " + strings.Join(r.Addrs, ",")
	case devcore.Spawned:
		return "spawned redis-server"
	}
	return string(r.Kind)
}

// describeSQL names a SQL backend for the report.
func describeSQL(kind devcore.Kind) string {
	if kind == devcore.External {
		return "MySQL"
	}
	return string(kind)
}
