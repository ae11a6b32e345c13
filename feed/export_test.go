package feed

import "github.com/jmoiron/sqlx"

// FollowsTable exposes the follower-side table of user, for tests that
// simulate a crash between the two shard writes.
func (s *Service) FollowsTable(user string) (*sqlx.DB, string) {
	sh := s.shardOfUser(user)
	return sh.DB, sh.Table
}

// EncodeCursor exposes the cursor encoder to the fuzz test.
func EncodeCursor(score, id int64) string { return encodeCursor(position{score, id}) }

// DecodeCursor exposes the cursor decoder to the fuzz test.
func DecodeCursor(c string) (int64, int64, error) {
	p, err := decodeCursor(c)
	return p.score, p.id, err
}
