package feed

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/gene"
)

// Blocks and mutes, both recorded in SQL in the shard of the user who made
// them. A block removes the follows both ways and refuses new ones; a mute
// only hides the muted author's posts from the muter's Timeline.

// Block records that blocker blocks blocked and removes the follow both
// ways; neither can follow the other while the block stands.
func (s *Service) Block(ctx context.Context, blocker, blocked string) (err error) {
	ctx, call := s.obs.blockOp.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validPair(blocker, blocked); err != nil {
		return err
	}
	sh := s.shardOfUser(blocker)
	if _, err := sh.DB.ExecContext(ctx, insertIgnore(sh.DB)+` INTO `+gene.Sibling(sh, "feed_blocks")+` (blocker, blocked, created_at) VALUES (?, ?, ?)`,
		blocker, blocked, s.nowMs()); err != nil {
		return fmt.Errorf("feed: block: %w", err)
	}
	return errors.Join(s.unfollow(ctx, blocker, blocked), s.unfollow(ctx, blocked, blocker))
}

// refuseBlocked returns ErrBlocked when a or b blocked the other.
func (s *Service) refuseBlocked(ctx context.Context, a, b string) error {
	for _, p := range [][2]string{{a, b}, {b, a}} {
		sh := s.shardOfUser(p[0])
		var n int
		if err := sh.DB.GetContext(ctx, &n, `SELECT COUNT(*) FROM `+gene.Sibling(sh, "feed_blocks")+` WHERE blocker = ? AND blocked = ?`, p[0], p[1]); err != nil {
			return fmt.Errorf("feed: read blocks: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("%w: %s and %s", ErrBlocked, a, b)
		}
	}
	return nil
}

// Unblock lifts blocker's block of blocked: from then on either may follow
// the other again. It does not restore the follows Block removed (as on
// the large networks: an unblocked account is not re-followed), so the
// unblocked author's posts show in blocker's Timeline again once blocker
// follows them, from the next read. Unblocking someone not blocked is a
// no-op; a block blocked made of blocker stands.
func (s *Service) Unblock(ctx context.Context, blocker, blocked string) (err error) {
	ctx, call := s.obs.unblock.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validPair(blocker, blocked); err != nil {
		return err
	}
	sh := s.shardOfUser(blocker)
	if _, err := sh.DB.ExecContext(ctx, `DELETE FROM `+gene.Sibling(sh, "feed_blocks")+` WHERE blocker = ? AND blocked = ?`, blocker, blocked); err != nil {
		return fmt.Errorf("feed: unblock: %w", err)
	}
	return nil
}

// Mute hides author's posts from user's Timeline, pushed and pulled alike,
// from the next read until Unmute; user keeps following author (fan-out
// still pushes to user's inbox, so Unmute shows the posts again at once,
// and a muted celebrity is simply not pulled). Muting someone user does not
// follow is allowed and takes effect if user follows them later. Muting
// again is a no-op. A mute does not apply to AuthorPosts (author's own
// page) and is not subtracted by UnreadSince (see there).
func (s *Service) Mute(ctx context.Context, user, author string) (err error) {
	ctx, call := s.obs.mute.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validPair(user, author); err != nil {
		return err
	}
	sh := s.shardOfUser(user)
	if _, err := sh.DB.ExecContext(ctx, insertIgnore(sh.DB)+` INTO `+gene.Sibling(sh, "feed_mutes")+` (muter, muted, created_at) VALUES (?, ?, ?)`,
		user, author, s.nowMs()); err != nil {
		return fmt.Errorf("feed: mute: %w", err)
	}
	return s.forgetMutes(ctx, user)
}

// Unmute undoes Mute: author's posts show in user's Timeline again from the
// next read. Unmuting someone not muted is a no-op.
func (s *Service) Unmute(ctx context.Context, user, author string) (err error) {
	ctx, call := s.obs.unmute.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validPair(user, author); err != nil {
		return err
	}
	sh := s.shardOfUser(user)
	if _, err := sh.DB.ExecContext(ctx, `DELETE FROM `+gene.Sibling(sh, "feed_mutes")+` WHERE muter = ? AND muted = ?`, user, author); err != nil {
		return fmt.Errorf("feed: unmute: %w", err)
	}
	return s.forgetMutes(ctx, user)
}

// forgetMutes drops user's cached mutes after an SQL write; the next read
// loads them again. The generation moves first, in one MULTI, so a cache
// fill that read SQL before the write cannot store the old set after it.
func (s *Service) forgetMutes(ctx context.Context, user string) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, s.userKey(user, "gen"))
		p.Del(ctx, s.userKey(user, "muted"), s.userKey(user, "viewtok"))
		return nil
	})
	if err != nil {
		return fmt.Errorf("feed: drop %s's cached mutes: %w", user, err)
	}
	return nil
}

// mutedBy reads every author user muted from SQL.
func (s *Service) mutedBy(ctx context.Context, user string) ([]string, error) {
	sh := s.shardOfUser(user)
	var out []string
	if err := sh.DB.SelectContext(ctx, &out, `SELECT muted FROM `+gene.Sibling(sh, "feed_mutes")+` WHERE muter = ?`, user); err != nil {
		return nil, fmt.Errorf("feed: mutes of %s: %w", user, err)
	}
	return out, nil
}
