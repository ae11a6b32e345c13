package idgen

import (
	"context"
	_ "embed"
	"fmt"
	"regexp"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/sqlutil"
)

//go:embed segment_incr.lua
var segmentIncrLua string

var segmentIncr = redis.NewScript(segmentIncrLua)

// RedisSource leases ranges with INCRBY on one key per tag. It is as fast as
// a Redis round trip, but a Redis failover can lose an acknowledged INCRBY
// and hand a range out twice: use it where a duplicate is caught anyway (a
// unique key in SQL), or on a Redis with appendfsync always; otherwise use
// SQLSource.
type RedisSource struct {
	c     redis.Scripter
	space keys.Space
}

// NewRedisSource returns a Source whose counters live under namespace.
func NewRedisSource(c redis.Scripter, namespace string) *RedisSource {
	return &RedisSource{c: c, space: keys.NewSpace(namespace)}
}

// Lease implements Source.
func (r *RedisSource) Lease(ctx context.Context, tag string, step int64) (int64, error) {
	if step < 1 {
		return 0, fmt.Errorf("%w: step %d < 1", ErrSegmentConfig, step)
	}
	return segmentIncr.Run(ctx, r.c, []string{r.space.Key(tag, "segment")}, step).Int64()
}

// SQLSource leases ranges from a table with one row per tag. A lease is one
// transaction: an upsert that adds step to the tag's row (creating it on the
// first lease), then a read of the new value, as Meituan's Leaf does — but
// without Leaf's separate UPDATE-then-INSERT, whose gap locks deadlock when
// several processes take the first lease of a new tag at once. A
// transaction the database rolls back for a lock conflict (a deadlock, a
// lock wait timeout, a busy SQLite) is run again after a jittered backoff
// until it commits or ctx ends. It works on MySQL/MariaDB and SQLite.
type SQLSource struct {
	db     *sqlx.DB
	table  string
	upsert string
}

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// NewSQLSource returns a Source on table, which CreateTable makes.
func NewSQLSource(db *sqlx.DB, table string) (*SQLSource, error) {
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("%w: table name %q", ErrSegmentConfig, table)
	}
	upsert := `INSERT INTO ` + table + ` (tag, max_id) VALUES (?, ?) ON CONFLICT (tag) DO UPDATE SET max_id = max_id + ?`
	if db.DriverName() == "mysql" {
		upsert = `INSERT INTO ` + table + ` (tag, max_id) VALUES (?, ?) ON DUPLICATE KEY UPDATE max_id = max_id + ?`
	}
	return &SQLSource{db: db, table: table, upsert: upsert}, nil
}

// CreateTable creates the segment table if it does not exist.
func (s *SQLSource) CreateTable(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+s.table+` (
		tag    VARCHAR(128) NOT NULL PRIMARY KEY,
		max_id BIGINT NOT NULL
	)`)
	if err != nil {
		return fmt.Errorf("idgen: create %s: %w", s.table, err)
	}
	return nil
}

// Lease implements Source.
func (s *SQLSource) Lease(ctx context.Context, tag string, step int64) (int64, error) {
	if step < 1 {
		return 0, fmt.Errorf("%w: step %d < 1", ErrSegmentConfig, step)
	}
	if tag == "" || len(tag) > 128 {
		return 0, fmt.Errorf("%w: tag must be 1..128 bytes", ErrSegmentConfig)
	}
	var last int64
	err := sqlutil.Retry(ctx, 0, func() (err error) {
		last, err = s.lease(ctx, tag, step)
		return err
	})
	return last, err
}

func (s *SQLSource) lease(ctx context.Context, tag string, step int64) (int64, error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, s.upsert, tag, step, step); err != nil {
		return 0, err
	}
	var last int64
	if err := tx.GetContext(ctx, &last, `SELECT max_id FROM `+s.table+` WHERE tag = ?`, tag); err != nil {
		return 0, err
	}
	return last, tx.Commit()
}
