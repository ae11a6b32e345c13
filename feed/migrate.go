package feed

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// userTables lists one user shard's tables. A follow is written twice: in
// the follower's shard (feed_follows, the truth, with a "mirrored" mark) and
// in the followee's (feed_followers, for fan-out); blocks live in the
// blocker's shard, mutes in the muter's.
func userTables(sh shard.Shard) []sqlutil.Table {
	return []sqlutil.Table{
		{Name: sh.Table, Columns: `follower {{key}} NOT NULL,
		followee {{key}} NOT NULL,
		state VARCHAR(12) NOT NULL,
		mirrored INT NOT NULL,
		updated_at BIGINT NOT NULL,
		PRIMARY KEY (follower, followee)`, Indexes: []string{"ix_unmirrored (mirrored, updated_at)"}},
		{Name: gene.Sibling(sh, "feed_followers"), Columns: `followee {{key}} NOT NULL, follower {{key}} NOT NULL, PRIMARY KEY (followee, follower)`},
		{Name: gene.Sibling(sh, "feed_blocks"), Columns: `blocker {{key}} NOT NULL, blocked {{key}} NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY (blocker, blocked)`},
		{Name: gene.Sibling(sh, "feed_mutes"), Columns: `muter {{key}} NOT NULL, muted {{key}} NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY (muter, muted)`},
	}
}

// postTable is one post shard. fanout is 0 while the post waits for its
// fan-out (the table is the fan-out's outbox), 1 once its chunks are
// published, 2 for a post that is pulled at read time instead. ix_profile
// serves AuthorPosts past the outbox; Migrate adds it to tables made before
// it existed.
func postTable(sh shard.Shard) sqlutil.Table {
	return sqlutil.Table{Name: sh.Table, Columns: `id BIGINT NOT NULL PRIMARY KEY,
		author {{key}} NOT NULL,
		request_id {{key}} NOT NULL,
		body TEXT NOT NULL,
		created_at BIGINT NOT NULL,
		score BIGINT NOT NULL,
		deleted INT NOT NULL,
		fanout INT NOT NULL`, Indexes: []string{"UNIQUE uq_request (author, request_id)", "ix_fanout (fanout, id)", "ix_author (author, id)", "ix_profile (author, score, id)"}}
}

// celebrityTable is the registry of pulled authors, in the first database.
var celebrityTable = sqlutil.Table{Name: "feed_celebrities", Columns: `user_id {{key}} NOT NULL PRIMARY KEY, since BIGINT NOT NULL`}

// Migrate creates every table that does not exist yet and adds the
// indexes an existing one lacks (a table made by an older version).
func (s *Service) Migrate(ctx context.Context) error {
	if err := s.idSrc.CreateTable(ctx); err != nil {
		return fmt.Errorf("feed: migrate: %w", err)
	}
	type job struct {
		sh shard.Shard
		t  sqlutil.Table
	}
	jobs := []job{{shard.Shard{DB: s.dbs[0]}, celebrityTable}}
	for _, sh := range s.users.All() {
		for _, t := range userTables(sh) {
			jobs = append(jobs, job{sh, t})
		}
	}
	for _, sh := range s.posts.All() {
		jobs = append(jobs, job{sh, postTable(sh)})
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, j := range jobs {
		g.Go(func() error {
			if err := j.t.Create(gctx, j.sh.DB); err != nil {
				return fmt.Errorf("feed: migrate: %w", err)
			}
			return nil
		})
	}
	return g.Wait()
}
