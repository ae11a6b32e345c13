package idgen

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/sqlutil"
)

var (
	//go:embed node_grant.lua
	nodeGrantLua string
	//go:embed node_renew.lua
	nodeRenewLua string
	//go:embed node_release.lua
	nodeReleaseLua string

	nodeGrant   = redis.NewScript(nodeGrantLua)
	nodeRenew   = redis.NewScript(nodeRenewLua)
	nodeRelease = redis.NewScript(nodeReleaseLua)
)

// RedisNodeStore keeps each pool of node ids in one Redis hash (one key, so
// Redis Cluster serves it from one slot). Each operation is one script that
// reads the server's TIME. A failover that loses the last grant of an id
// can grant it again while its first holder still runs, until that holder's
// next renewal is refused (at most RenewEvery later): see the package doc.
type RedisNodeStore struct {
	c     redis.Scripter
	space keys.Space
}

// NewRedisNodeStore returns a NodeStore whose pools live under namespace.
func NewRedisNodeStore(c redis.Scripter, namespace string) *RedisNodeStore {
	return &RedisNodeStore{c: c, space: keys.NewSpace(namespace)}
}

func (r *RedisNodeStore) key(pool string) string { return r.space.Key(pool, "nodes") }

// Grant implements NodeStore.
func (r *RedisNodeStore) Grant(ctx context.Context, pool string, first, last int64, holder string, ttl, margin time.Duration) (NodeGrant, error) {
	v, err := nodeGrant.Run(ctx, r.c, []string{r.key(pool)}, first, last, holder, ttl.Milliseconds(), margin.Milliseconds()).Int64Slice()
	if err != nil {
		return NodeGrant{}, err
	}
	if len(v) != 2 {
		return NodeGrant{}, fmt.Errorf("node grant script returned %v", v)
	}
	if v[0] < 0 {
		return NodeGrant{}, ErrNoFreeNode
	}
	return NodeGrant{ID: v[0], Token: v[1]}, nil
}

// Renew implements NodeStore.
func (r *RedisNodeStore) Renew(ctx context.Context, pool string, g NodeGrant, holder string, ttl time.Duration) error {
	ok, err := nodeRenew.Run(ctx, r.c, []string{r.key(pool)}, g.ID, g.Token, holder, ttl.Milliseconds()).Int()
	if err != nil {
		return err
	}
	if ok != 1 {
		return ErrLeaseLost
	}
	return nil
}

// Release implements NodeStore.
func (r *RedisNodeStore) Release(ctx context.Context, pool string, g NodeGrant, holder string) error {
	return nodeRelease.Run(ctx, r.c, []string{r.key(pool)}, g.ID, g.Token, holder).Err()
}

// SQLNodeStore keeps pools of node ids in a table with one row per (pool,
// id), which CreateTable makes. Every change is one conditional UPDATE (the
// database is the guard), with times read from the database server's clock
// in milliseconds since the Unix epoch. It works on MySQL/MariaDB and
// SQLite.
type SQLNodeStore struct {
	db    *sqlx.DB
	table string
	now   string // a query returning the server's clock in Unix ms
}

// NewSQLNodeStore returns a NodeStore on table. It calls sqlutil.Check,
// which limits a SQLite pool to one connection.
func NewSQLNodeStore(db *sqlx.DB, table string) (*SQLNodeStore, error) {
	if err := sqlutil.Check(db, "idgen"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLeaseConfig, err)
	}
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("%w: table name %q", ErrLeaseConfig, table)
	}
	// UTC_TIMESTAMP arithmetic, not UNIX_TIMESTAMP(NOW()): the latter goes
	// through the session time zone, ambiguous for an hour at a DST change.
	now := `SELECT CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)`
	if !sqlutil.IsMySQL(db) {
		now = `SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`
	}
	return &SQLNodeStore{db: db, table: table, now: now}, nil
}

// CreateTable creates the node lease table if it does not exist.
func (s *SQLNodeStore) CreateTable(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+s.table+` (
		pool       VARCHAR(64) NOT NULL,
		node_id    INT NOT NULL,
		token      BIGINT NOT NULL,
		holder     VARCHAR(64) NOT NULL,
		expires_ms BIGINT NOT NULL,
		PRIMARY KEY (pool, node_id)
	)`)
	if err != nil {
		return fmt.Errorf("idgen: create %s: %w", s.table, err)
	}
	return nil
}

func (s *SQLNodeStore) clock(ctx context.Context) (int64, error) {
	var ms int64
	err := s.db.GetContext(ctx, &ms, s.now)
	return ms, err
}

// Grant implements NodeStore.
func (s *SQLNodeStore) Grant(ctx context.Context, pool string, first, last int64, holder string, ttl, margin time.Duration) (NodeGrant, error) {
	now, err := s.clock(ctx)
	if err != nil {
		return NodeGrant{}, err
	}
	var mine []NodeGrant // a retry of this holder's grant finds its lease
	err = s.db.SelectContext(ctx, &mine, `SELECT node_id AS id, token FROM `+s.table+` WHERE pool = ? AND holder = ? AND expires_ms > ?`, pool, holder, now)
	if err != nil || len(mine) > 0 {
		return firstOf(mine), err
	}
	if err := s.fill(ctx, pool, first, last); err != nil {
		return NodeGrant{}, err
	}
	var free []NodeGrant
	err = s.db.SelectContext(ctx, &free, `SELECT node_id AS id, token FROM `+s.table+`
		WHERE pool = ? AND node_id BETWEEN ? AND ? AND expires_ms <= ? ORDER BY expires_ms, node_id LIMIT 8`,
		pool, first, last, now-margin.Milliseconds())
	if err != nil {
		return NodeGrant{}, err
	}
	for _, f := range free { // contenders race for the same rows: the token is the compare-and-set
		token := max(f.Token+1, now)
		res, err := s.db.ExecContext(ctx, `UPDATE `+s.table+` SET token = ?, holder = ?, expires_ms = ?
			WHERE pool = ? AND node_id = ? AND token = ? AND expires_ms <= ?`,
			token, holder, now+ttl.Milliseconds(), pool, f.ID, f.Token, now-margin.Milliseconds())
		if err != nil {
			return NodeGrant{}, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return NodeGrant{ID: f.ID, Token: token}, err
		}
	}
	return NodeGrant{}, ErrNoFreeNode
}

func firstOf(gs []NodeGrant) NodeGrant {
	if len(gs) == 0 {
		return NodeGrant{}
	}
	return gs[0]
}

// fill inserts the missing rows of [first, last], as never granted.
func (s *SQLNodeStore) fill(ctx context.Context, pool string, first, last int64) error {
	var have int64
	err := s.db.GetContext(ctx, &have, `SELECT COUNT(*) FROM `+s.table+` WHERE pool = ? AND node_id BETWEEN ? AND ?`, pool, first, last)
	if err != nil || have == last-first+1 {
		return err
	}
	rows := make([]string, 0, last-first+1)
	args := make([]any, 0, 2*(last-first+1))
	for id := first; id <= last; id++ {
		rows = append(rows, "(?, ?, 0, '', 0)")
		args = append(args, pool, id)
	}
	insert := `INSERT INTO ` + s.table + ` (pool, node_id, token, holder, expires_ms) VALUES ` + strings.Join(rows, ", ")
	if sqlutil.IsMySQL(s.db) {
		insert += ` ON DUPLICATE KEY UPDATE node_id = node_id`
	} else {
		insert += ` ON CONFLICT (pool, node_id) DO NOTHING`
	}
	return sqlutil.Retry(ctx, 0, func() error {
		_, err := s.db.ExecContext(ctx, insert, args...)
		return err
	})
}

// Renew implements NodeStore.
func (s *SQLNodeStore) Renew(ctx context.Context, pool string, g NodeGrant, holder string, ttl time.Duration) error {
	now, err := s.clock(ctx)
	if err != nil {
		return err
	}
	held := ` WHERE pool = ? AND node_id = ? AND token = ? AND holder = ? AND expires_ms > ?`
	res, err := s.db.ExecContext(ctx, `UPDATE `+s.table+` SET expires_ms = ?`+held, now+ttl.Milliseconds(), pool, g.ID, g.Token, holder, now)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err
	}
	// MySQL counts changed rows: a renewal in the same millisecond as the
	// last one changes nothing and is still a renewal.
	var still int
	if err := s.db.GetContext(ctx, &still, `SELECT COUNT(*) FROM `+s.table+held, pool, g.ID, g.Token, holder, now); err != nil {
		return err
	}
	if still == 0 {
		return ErrLeaseLost
	}
	return nil
}

// Release implements NodeStore.
func (s *SQLNodeStore) Release(ctx context.Context, pool string, g NodeGrant, holder string) error {
	now, err := s.clock(ctx)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `UPDATE `+s.table+` SET expires_ms = ?
		WHERE pool = ? AND node_id = ? AND token = ? AND holder = ? AND expires_ms > ?`, now, pool, g.ID, g.Token, holder, now)
	return err
}
