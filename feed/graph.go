package feed

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
)

// Follow states of a follower-side row.
const (
	stateFollowing   = "following"
	stateUnfollowing = "unfollowing"
)

var (
	//go:embed regraph.lua
	regraphLua    string
	regraphScript = redis.NewScript(regraphLua)
)

// Follow makes follower follow followee. The follower-side row is written
// first and is the truth; the followee-side row (which fan-out reads)
// follows, and a crash between the two is finished by Repair. The
// followee's recent posts are merged into the follower's inbox. Following
// again is a no-op; either user having blocked the other returns ErrBlocked.
func (s *Service) Follow(ctx context.Context, follower, followee string) (err error) {
	ctx, call := s.obs.follow.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validPair(follower, followee); err != nil {
		return err
	}
	if err := s.refuseBlocked(ctx, follower, followee); err != nil {
		return err
	}
	sh := s.shardOfUser(follower)
	_, err = sh.DB.ExecContext(ctx, `INSERT INTO `+sh.Table+` (follower, followee, state, mirrored, updated_at) VALUES (?, ?, ?, 0, ?)`,
		follower, followee, stateFollowing, s.nowMs())
	if sqlutil.IsDuplicate(err) {
		_, err = sh.DB.ExecContext(ctx, `UPDATE `+sh.Table+` SET state = ?, mirrored = 0, updated_at = ? WHERE follower = ? AND followee = ? AND state <> ?`,
			stateFollowing, s.nowMs(), follower, followee, stateFollowing)
	}
	if err != nil {
		return fmt.Errorf("feed: follow: %w", err)
	}
	// A block that committed while the row was being written: whichever
	// of the two writes came second sees the other and undoes the follow.
	if err := s.refuseBlocked(ctx, follower, followee); err != nil {
		if uerr := s.unfollow(ctx, follower, followee); uerr != nil {
			return errors.Join(err, uerr)
		}
		return err
	}
	return s.finishFollow(ctx, follower, followee)
}

// finishFollow writes the followee-side row, marks the truth mirrored and
// updates Redis. Safe to run again.
func (s *Service) finishFollow(ctx context.Context, follower, followee string) error {
	fs := s.shardOfUser(followee)
	if _, err := fs.DB.ExecContext(ctx, insertIgnore(fs.DB)+` INTO `+gene.Sibling(fs, "feed_followers")+` (followee, follower) VALUES (?, ?)`, followee, follower); err != nil {
		return fmt.Errorf("feed: follow (followee side): %w", err)
	}
	if err := s.forgetCount(ctx, followee); err != nil {
		return err
	}
	sh := s.shardOfUser(follower)
	if _, err := sh.DB.ExecContext(ctx, `UPDATE `+sh.Table+` SET mirrored = 1 WHERE follower = ? AND followee = ? AND state = ? AND mirrored = 0`,
		follower, followee, stateFollowing); err != nil {
		return fmt.Errorf("feed: follow (mark mirrored): %w", err)
	}
	recent, err := s.rdb.ZRevRangeWithScores(ctx, s.userKey(followee, "outbox"), 0, int64(min(s.cfg.InboxCap, s.cfg.OutboxCap))-1).Result()
	if err != nil {
		return fmt.Errorf("feed: follow: read outbox: %w", err)
	}
	args := []any{"add", s.cfg.InboxCap, s.cfg.InboxSlack}
	for _, z := range recent {
		args = append(args, int64(z.Score), z.Member)
	}
	return s.regraph(ctx, follower, args)
}

func (s *Service) regraph(ctx context.Context, reader string, args []any) error {
	ks := []string{s.userKey(reader, "following"), s.userKey(reader, "gen"), s.userKey(reader, "inbox"), s.userKey(reader, "viewtok")}
	if err := regraphScript.Run(ctx, s.rdb, ks, args...).Err(); err != nil {
		return fmt.Errorf("feed: update %s's cached graph: %w", reader, err)
	}
	return nil
}

// Unfollow stops follower following followee, at once for timelines: the
// follower's cached followees are dropped and the followee's posts removed
// from their inbox (a post pushed late is still hidden: timelines show only
// posts by accounts followed). Unfollowing someone not followed is a no-op.
func (s *Service) Unfollow(ctx context.Context, follower, followee string) (err error) {
	ctx, call := s.obs.unfollow.Start(ctx)
	defer func() { err = call.End(err) }()
	return s.unfollow(ctx, follower, followee)
}

func (s *Service) unfollow(ctx context.Context, follower, followee string) error {
	if err := validPair(follower, followee); err != nil {
		return err
	}
	sh := s.shardOfUser(follower)
	res, err := sh.DB.ExecContext(ctx, `UPDATE `+sh.Table+` SET state = ?, mirrored = 0, updated_at = ? WHERE follower = ? AND followee = ?`,
		stateUnfollowing, s.nowMs(), follower, followee)
	if err != nil {
		return fmt.Errorf("feed: unfollow: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil
	}
	return s.finishUnfollow(ctx, follower, followee)
}

// finishUnfollow updates Redis, deletes the followee-side row, then the
// truth. Safe to run again.
func (s *Service) finishUnfollow(ctx context.Context, follower, followee string) error {
	recent, err := s.rdb.ZRange(ctx, s.userKey(followee, "outbox"), 0, -1).Result()
	if err != nil {
		return fmt.Errorf("feed: unfollow: read outbox: %w", err)
	}
	args := []any{"remove", s.cfg.InboxCap, s.cfg.InboxSlack}
	for _, id := range recent {
		args = append(args, id)
	}
	if err := s.regraph(ctx, follower, args); err != nil {
		return err
	}
	fs := s.shardOfUser(followee)
	if _, err := fs.DB.ExecContext(ctx, `DELETE FROM `+gene.Sibling(fs, "feed_followers")+` WHERE followee = ? AND follower = ?`, followee, follower); err != nil {
		return fmt.Errorf("feed: unfollow (followee side): %w", err)
	}
	if err := s.forgetCount(ctx, followee); err != nil {
		return err
	}
	sh := s.shardOfUser(follower)
	if _, err := sh.DB.ExecContext(ctx, `DELETE FROM `+sh.Table+` WHERE follower = ? AND followee = ? AND state = ?`, follower, followee, stateUnfollowing); err != nil {
		return fmt.Errorf("feed: unfollow (follower side): %w", err)
	}
	return nil
}

// Followees returns up to limit accounts user follows, in byte order after
// the id after ("" for the first page).
func (s *Service) Followees(ctx context.Context, user, after string, limit int) (_ []string, err error) {
	ctx, call := s.obs.followees.Start(ctx)
	defer func() { err = call.End(err) }()
	return s.followeesPage(ctx, user, after, limit)
}

func (s *Service) followeesPage(ctx context.Context, user, after string, limit int) ([]string, error) {
	if err := validPage(user, limit); err != nil {
		return nil, err
	}
	sh := s.shardOfUser(user)
	var out []string
	err := sh.DB.SelectContext(ctx, &out, `SELECT followee FROM `+sh.Table+` WHERE follower = ? AND state = ? AND followee > ? ORDER BY followee LIMIT ?`,
		user, stateFollowing, after, limit)
	if err != nil {
		return nil, fmt.Errorf("feed: followees of %s: %w", user, err)
	}
	return out, nil
}

// Followers returns up to limit followers of user, in byte order after the
// id after ("" for the first page), from the followee-side rows.
func (s *Service) Followers(ctx context.Context, user, after string, limit int) (_ []string, err error) {
	ctx, call := s.obs.followersOp.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validPage(user, limit); err != nil {
		return nil, err
	}
	return s.followers(ctx, user, after, limit)
}

func (s *Service) followers(ctx context.Context, user, after string, limit int) ([]string, error) {
	sh := s.shardOfUser(user)
	var out []string
	err := sh.DB.SelectContext(ctx, &out, `SELECT follower FROM `+gene.Sibling(sh, "feed_followers")+` WHERE followee = ? AND follower > ? ORDER BY follower LIMIT ?`,
		user, after, limit)
	if err != nil {
		return nil, fmt.Errorf("feed: followers of %s: %w", user, err)
	}
	return out, nil
}

// FollowerCount returns how many followers user has, cached in Redis (the
// cache is dropped by every follow and unfollow and counted again from SQL
// on a miss, so it is exact once writes settle).
func (s *Service) FollowerCount(ctx context.Context, user string) (_ int64, err error) {
	ctx, call := s.obs.followerCount.Start(ctx)
	defer func() { err = call.End(err) }()
	return s.followerCount(ctx, user)
}

func (s *Service) followerCount(ctx context.Context, user string) (int64, error) {
	if err := validUser(user); err != nil {
		return 0, err
	}
	key := s.userKey(user, "followers")
	n, err := s.rdb.Get(ctx, key).Int64()
	if err == nil {
		return n, nil
	}
	if !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("feed: follower count: %w", err)
	}
	v, err, _ := s.flight.Do("count:"+user, func() (any, error) {
		sh := s.shardOfUser(user)
		var n int64
		if err := sh.DB.GetContext(ctx, &n, `SELECT COUNT(*) FROM `+gene.Sibling(sh, "feed_followers")+` WHERE followee = ?`, user); err != nil {
			return int64(0), fmt.Errorf("feed: count followers of %s: %w", user, err)
		}
		s.rdb.SetNX(ctx, key, n, s.cfg.CacheTTL) // a miss next time costs one COUNT
		return n, nil
	})
	return v.(int64), err
}

// forgetCount drops user's cached follower count. A count read from SQL
// before a write and cached after it is the one stale case; CacheTTL
// bounds it.
func (s *Service) forgetCount(ctx context.Context, user string) error {
	if err := s.rdb.Del(ctx, s.userKey(user, "followers")).Err(); err != nil {
		return fmt.Errorf("feed: drop follower count: %w", err)
	}
	return nil
}

// Repair finishes follows and unfollows that stopped between the
// follower-side and the followee-side write (a crash, a database or Redis
// error) and are older than RepairGrace, and returns how many it finished.
// Run it periodically; it is safe beside live calls and other Repairs.
func (s *Service) Repair(ctx context.Context) (_ int, err error) {
	ctx, call := s.obs.repair.Start(ctx)
	defer func() { err = call.End(err) }()
	done := 0
	for _, sh := range s.users.All() {
		for {
			var rows []struct {
				Follower string `db:"follower"`
				Followee string `db:"followee"`
				State    string `db:"state"`
			}
			err := sh.DB.SelectContext(ctx, &rows, `SELECT follower, followee, state FROM `+sh.Table+` WHERE mirrored = 0 AND updated_at <= ? ORDER BY updated_at LIMIT 500`,
				s.nowMs()-s.cfg.RepairGrace.Milliseconds())
			if err != nil {
				return done, fmt.Errorf("feed: repair: %w", err)
			}
			for _, r := range rows {
				if r.State == stateFollowing {
					err = s.finishFollow(ctx, r.Follower, r.Followee)
				} else {
					err = s.finishUnfollow(ctx, r.Follower, r.Followee)
				}
				if err != nil {
					return done, err
				}
				done++
			}
			if len(rows) < 500 {
				break
			}
		}
	}
	return done, nil
}

func validPair(a, b string) error {
	if err := validUser(a); err != nil {
		return err
	}
	if err := validUser(b); err != nil {
		return err
	}
	if a == b {
		return fmt.Errorf("%w: %s cannot follow, block or mute themselves", ErrInvalid, a)
	}
	return nil
}

func validPage(user string, limit int) error {
	if err := validUser(user); err != nil {
		return err
	}
	if limit < 1 || limit > 10_000 {
		return fmt.Errorf("%w: limit %d (1..10000)", ErrInvalid, limit)
	}
	return nil
}

// insertIgnore is the dialect's INSERT that skips a duplicate key.
func insertIgnore(db *sqlx.DB) string {
	if sqlutil.IsMySQL(db) {
		return "INSERT IGNORE"
	}
	return "INSERT OR IGNORE"
}

// SeedFollows bulk-loads follows (follower, followee) for an import or a
// fixture: both sides, already mirrored, in multi-row inserts per shard,
// duplicates skipped. It bypasses block checks and Redis (whose caches
// load on demand), so run it before the users are live.
func (s *Service) SeedFollows(ctx context.Context, pairs [][2]string) (err error) {
	ctx, call := s.obs.seedFollows.Start(ctx)
	defer func() { err = call.End(err) }()
	type rows struct {
		db    *sqlx.DB
		table string
		cols  string
		vals  [][]any
	}
	groups := map[string]*rows{}
	add := func(db *sqlx.DB, table, cols string, v ...any) {
		g := groups[table]
		if g == nil {
			g = &rows{db: db, table: table, cols: cols}
			groups[table] = g
		}
		g.vals = append(g.vals, v)
	}
	now := s.nowMs()
	for _, p := range pairs {
		if err := validPair(p[0], p[1]); err != nil {
			return err
		}
		fs, es := s.shardOfUser(p[0]), s.shardOfUser(p[1])
		add(fs.DB, fs.Table, "(follower, followee, state, mirrored, updated_at)", p[0], p[1], stateFollowing, 1, now)
		add(es.DB, gene.Sibling(es, "feed_followers"), "(followee, follower)", p[1], p[0])
	}
	for _, g := range groups {
		for start := 0; start < len(g.vals); start += 500 {
			var q strings.Builder
			q.WriteString(insertIgnore(g.db) + " INTO " + g.table + " " + g.cols + " VALUES ")
			var args []any
			for i, v := range g.vals[start:min(start+500, len(g.vals))] {
				if i > 0 {
					q.WriteByte(',')
				}
				q.WriteString("(?" + strings.Repeat(", ?", len(v)-1) + ")")
				args = append(args, v...)
			}
			if _, err := g.db.ExecContext(ctx, q.String(), args...); err != nil {
				return fmt.Errorf("feed: seed follows: %w", err)
			}
		}
	}
	return nil
}
