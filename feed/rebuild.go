package feed

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// A reader's cached sets and inbox, rebuilt from SQL and the outboxes when
// Redis lacks them (a new or returning reader, an expiry, a failover).

// followees reads every account reader follows from SQL.
func (s *Service) followees(ctx context.Context, reader string) ([]string, error) {
	var all []string
	after := ""
	for {
		page, err := s.followeesPage(ctx, reader, after, 10_000)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < 10_000 {
			return all, nil
		}
		after = page[len(page)-1]
	}
}

// cacheSet reads one of reader's sets ("following" or "muted") from SQL
// (read) and caches it, unless a follow, unfollow, mute or unmute moved the
// generation meanwhile (then the next read loads it again). It returns the
// set as read, which is current for the read that asked: it was read after
// that read began.
func (s *Service) cacheSet(ctx context.Context, reader, part string, read func(context.Context, string) ([]string, error)) (map[string]bool, error) {
	gen, err := s.rdb.Get(ctx, s.userKey(reader, "gen")).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("feed: read generation: %w", err)
	}
	fs, err := read(ctx, reader)
	if err != nil {
		return nil, err
	}
	args := []any{gen, s.cfg.ActivePeriod.Milliseconds()}
	set := make(map[string]bool, len(fs))
	for _, f := range fs {
		args = append(args, f)
		set[f] = true
	}
	if err := followingScript.Run(ctx, s.rdb, []string{s.userKey(reader, part), s.userKey(reader, "gen"), s.userKey(reader, "viewtok")}, args...).Err(); err != nil {
		return nil, fmt.Errorf("feed: cache %s: %w", part, err)
	}
	return set, nil
}

// rebuildInbox opens reader's inbox — from then on fan-out pushes to it —
// then fills it with the newest posts of the non-celebrity accounts they
// follow, from their outboxes (celebrities are pulled at read anyway). A
// post published between the two steps is either in an outbox when it is
// read or pushed after the inbox opened, so none is missed. Each followee
// gives at most max(20, 4×InboxCap/followees) posts.
func (s *Service) rebuildInbox(ctx context.Context, reader string) error {
	inbox := s.userKey(reader, "inbox")
	if err := openScript.Run(ctx, s.rdb, []string{inbox, s.userKey(reader, "pushed")}, s.cfg.ActivePeriod.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("feed: open inbox: %w", err)
	}
	fs, err := s.followees(ctx, reader)
	if err != nil {
		return err
	}
	reg, err := s.celebrities(ctx)
	if err != nil {
		return err
	}
	var authors []string
	for _, f := range fs {
		if _, celeb := reg[f]; !celeb {
			authors = append(authors, f)
		}
	}
	per := int64(min(s.cfg.OutboxCap, s.cfg.InboxCap, max(20, 4*s.cfg.InboxCap/max(1, len(authors)))))
	var all []redis.Z
	for start := 0; start < len(authors); start += 500 {
		pipe := s.rdb.Pipeline()
		var cmds []*redis.ZSliceCmd
		for _, a := range authors[start:min(start+500, len(authors))] {
			cmds = append(cmds, pipe.ZRevRangeWithScores(ctx, s.userKey(a, "outbox"), 0, per-1))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("feed: read outboxes: %w", err)
		}
		for _, c := range cmds {
			all = append(all, c.Val()...)
		}
	}
	slices.SortFunc(all, func(a, b redis.Z) int {
		if a.Score > b.Score {
			return -1
		}
		if a.Score < b.Score {
			return 1
		}
		return 0
	})
	all = all[:min(len(all), s.cfg.InboxCap)]
	args := []any{s.cfg.InboxCap, s.cfg.InboxSlack, 1}
	for _, z := range all {
		args = append(args, int64(z.Score), z.Member)
	}
	if err := fillScript.Run(ctx, s.rdb, []string{inbox}, args...).Err(); err != nil {
		return fmt.Errorf("feed: fill inbox: %w", err)
	}
	return nil
}
