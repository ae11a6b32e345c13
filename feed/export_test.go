package feed

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/gene"
)

// FollowsTable exposes the follower-side table of user, for tests that
// simulate a crash between the two shard writes.
func (s *Service) FollowsTable(user string) (*sqlx.DB, string) {
	sh := s.shardOfUser(user)
	return sh.DB, sh.Table
}

// EncodeCursor exposes the cursor encoder (keyless, or with key) to the
// fuzz test.
func EncodeCursor(key []byte, reader string, score, id int64) string {
	return cursors{key}.encode(reader, position{score, id})
}

// DecodeCursor exposes the cursor decoder to the fuzz test.
func DecodeCursor(key []byte, reader, c string) (int64, int64, error) {
	p, err := cursors{key}.decode(reader, c)
	return p.score, p.id, err
}

// Promote registers user as a celebrity, for benchmarks that need many.
func (s *Service) Promote(ctx context.Context, user string) error { return s.promote(ctx, user) }

// InboxKey, PushedKey and OutboxKey name a user's keys, for benchmarks.
func (s *Service) InboxKey(user string) string      { return s.userKey(user, "inbox") }
func (s *Service) UserKey(user, part string) string { return s.userKey(user, part) }
func (s *Service) PushedKey(user string) string     { return s.userKey(user, "pushed") }
func (s *Service) OutboxKey(user string) string     { return s.userKey(user, "outbox") }

// FollowersTable names the followee-side table of user, for bulk seeding.
func (s *Service) FollowersTable(user string) (*sqlx.DB, string) {
	sh := s.shardOfUser(user)
	return sh.DB, gene.Sibling(sh, "feed_followers")
}

// PostKey names a post's Redis cache key, and PostsTable its SQL table,
// for the cache tests.
func (s *Service) PostKey(id int64) string { return s.postKey(id) }
func (s *Service) PostsTable(id int64) (*sqlx.DB, string) {
	sh := s.shardOfPost(id)
	return sh.DB, sh.Table
}

// MaxPending is maxPending.
const MaxPending = maxPending

// ReadsPrimaries reports whether pages may be read without read.lua.
func (s *Service) ReadsPrimaries() bool { return s.readsPrimaries }
