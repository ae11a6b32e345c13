package shard

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/jmoiron/sqlx"
	"golang.org/x/sync/errgroup"
)

// Config describes the tables of one logical table.
type Config struct {
	// Table is the logical table name, e.g. "links". Required.
	Table string
	// TablesPerDB is M, the tables in each database. Default 256 / N.
	TablesPerDB int
	// Pattern formats a physical table name from Table and the global table
	// number. Default "%s_%03d" (links_000), "%s_%04d" past 1000 tables.
	Pattern string
}

// Shard is one physical table.
type Shard struct {
	DB      *sqlx.DB
	DBIndex int    // which database, 0..N-1
	Index   int    // global table number, 0..N×M-1
	Table   string // physical table name
}

// Router maps keys and genes to shards.
type Router struct {
	shards []Shard
	perDB  int
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("shard: bad config")

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,50}$`)

// New returns a router over dbs (N = len(dbs)) with cfg.TablesPerDB tables in
// each.
func New(dbs []*sqlx.DB, cfg Config) (*Router, error) {
	if len(dbs) == 0 {
		return nil, fmt.Errorf("%w: no databases", ErrConfig)
	}
	if !identifier.MatchString(cfg.Table) {
		return nil, fmt.Errorf("%w: table name %q", ErrConfig, cfg.Table)
	}
	if cfg.TablesPerDB == 0 {
		cfg.TablesPerDB = max(1, 256/len(dbs))
	}
	total := len(dbs) * cfg.TablesPerDB
	if cfg.TablesPerDB < 1 || total > 1<<16 {
		return nil, fmt.Errorf("%w: %d databases × %d tables", ErrConfig, len(dbs), cfg.TablesPerDB)
	}
	if cfg.Pattern == "" {
		cfg.Pattern = "%s_%03d"
		if total > 1000 {
			cfg.Pattern = "%s_%04d"
		}
	}
	r := &Router{perDB: cfg.TablesPerDB, shards: make([]Shard, total)}
	seen := map[string]bool{}
	for i := range r.shards {
		name := fmt.Sprintf(cfg.Pattern, cfg.Table, i)
		if !identifier.MatchString(name) || seen[name] {
			return nil, fmt.Errorf("%w: pattern %q gives table name %q", ErrConfig, cfg.Pattern, name)
		}
		seen[name] = true
		r.shards[i] = Shard{DB: dbs[i/cfg.TablesPerDB], DBIndex: i / cfg.TablesPerDB, Index: i, Table: name}
	}
	return r, nil
}

// Tables returns N×M.
func (r *Router) Tables() int { return len(r.shards) }

// ByKey returns the shard of key.
func (r *Router) ByKey(key string) Shard { return r.ByHash(xxhash.Sum64String(key)) }

// ByHash returns the shard of a key whose xxhash is h.
func (r *Router) ByHash(h uint64) Shard { return r.shards[h%uint64(len(r.shards))] }

// ByGene returns the shard of an id carrying gene (see idgen.Genes).
func (r *Router) ByGene(gene uint64) Shard { return r.shards[gene%uint64(len(r.shards))] }

// All returns every shard in table order. The slice is a copy.
func (r *Router) All() []Shard { return append([]Shard(nil), r.shards...) }

// CreateTables runs ddl once per shard with every "{{table}}" replaced by
// the shard's table name, at most 8 at a time. Write the DDL so it can run
// again ("CREATE TABLE IF NOT EXISTS"), and in the dialect of the databases.
func (r *Router) CreateTables(ctx context.Context, ddl string) error {
	if !strings.Contains(ddl, "{{table}}") {
		return fmt.Errorf("%w: DDL template has no {{table}}", ErrConfig)
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, s := range r.shards {
		g.Go(func() error {
			if _, err := s.DB.ExecContext(ctx, strings.ReplaceAll(ddl, "{{table}}", s.Table)); err != nil {
				return fmt.Errorf("shard: create %s: %w", s.Table, err)
			}
			return nil
		})
	}
	return g.Wait()
}
