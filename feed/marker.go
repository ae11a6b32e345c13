package feed

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed marker.lua
	markerLua    string
	markerScript = redis.NewScript(markerLua)
)

// SetMarker records that user has read their timeline down to post id (the
// newest post they saw, usually the first of the page shown): the marker is
// the post's timeline position, so UnreadSince counts the posts that sort
// before it. The marker only moves forward: setting an older post (another
// device, a retried call) changes nothing, so SetMarker is idempotent. The
// post may have been deleted since; one that never existed is ErrNotFound.
// The marker lives in Redis for ActivePeriod after it was last set (like an
// inbox after its last read); a failover can lose it, which only makes
// UnreadSince count from the top.
func (s *Service) SetMarker(ctx context.Context, user string, id int64) (err error) {
	ctx, call := s.obs.setMarker.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validUser(user); err != nil {
		return err
	}
	if id <= 0 {
		return fmt.Errorf("%w: post id %d", ErrInvalid, id)
	}
	posts, err := s.hydrate(ctx, []int64{id})
	if err != nil {
		return err
	}
	if posts[id] == nil { // a cached miss may predate the post: SQL decides
		if posts, err = s.load(ctx, []int64{id}); err != nil {
			return err
		}
	}
	p := posts[id]
	if p == nil {
		return fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err := markerScript.Run(ctx, s.rdb, []string{s.userKey(user, "marker")}, p.Score, p.ID, s.cfg.ActivePeriod.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("feed: set marker: %w", err)
	}
	return nil
}

// Marker returns the post id of user's read marker, 0 when there is none.
func (s *Service) Marker(ctx context.Context, user string) (_ int64, err error) {
	ctx, call := s.obs.marker.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validUser(user); err != nil {
		return 0, err
	}
	p, err := s.readMarker(ctx, user)
	return p.id, err
}

func (s *Service) readMarker(ctx context.Context, user string) (position, error) {
	v, err := s.rdb.Get(ctx, s.userKey(user, "marker")).Result()
	if errors.Is(err, redis.Nil) {
		return position{}, nil
	}
	if err != nil {
		return position{}, fmt.Errorf("feed: read marker: %w", err)
	}
	sc, id, _ := strings.Cut(v, ":")
	score, err1 := strconv.ParseInt(sc, 10, 64)
	pid, err2 := strconv.ParseInt(id, 10, 64)
	if err1 != nil || err2 != nil {
		return position{}, nil // a value this version cannot read: no marker
	}
	return position{score: score, id: pid}, nil
}

// UnreadSince returns how many entries user's timeline sources hold newer
// than their read marker (all of them without one): the entries of the
// inbox (after moving the pending pushes into it, as a read does) plus those
// of each followed, unmuted celebrity's outbox, counted by ZCOUNT — no post
// is read or hydrated. Cost: one read.lua call (O(pushes since the last
// read) + O(followees), and it keeps user active like a Timeline read), then
// one pipeline of two O(log N) commands per source (a ZCOUNT strictly above
// the marker's score and the few entries at exactly its score, ordered by
// id as Timeline orders them).
//
// It is an upper bound of what Timeline would show above the marker, exact
// when none of these is in the inbox: a post deleted since it was pushed
// (until a read passes it and drops it), a post by a muted account that is
// not a celebrity (mutes filter at read), a post pushed by a chunk applied
// after its reader unfollowed the author, and a post of a newly promoted
// celebrity that was both pushed and is pulled (counted twice). Blocks
// need no subtraction: a block removes the follows, as an unfollow does.
func (s *Service) UnreadSince(ctx context.Context, user string) (_ int64, err error) {
	ctx, call := s.obs.unreadSince.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validUser(user); err != nil {
		return 0, err
	}
	m, err := s.readMarker(ctx, user)
	if err != nil {
		return 0, err
	}
	_, g, err := s.readInbox(ctx, user, "+inf", 1)
	if err != nil {
		return 0, err
	}
	reg, err := s.celebrities(ctx)
	if err != nil {
		return 0, err
	}
	sources := []string{s.userKey(user, "inbox")}
	for _, c := range g.pulled(reg) {
		sources = append(sources, s.userKey(c, "outbox"))
	}
	score := strconv.FormatInt(m.score, 10) // 0 without a marker: the inbox's marker member scores 0
	pipe := s.rdb.Pipeline()
	above := make([]*redis.IntCmd, len(sources))
	ties := make([]*redis.StringSliceCmd, len(sources))
	for i, k := range sources {
		above[i] = pipe.ZCount(ctx, k, "("+score, "+inf")
		if m.score > 0 {
			ties[i] = pipe.ZRangeByScore(ctx, k, &redis.ZRangeBy{Min: score, Max: score})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("feed: count unread: %w", err)
	}
	mark := entry{id: strconv.FormatInt(m.id, 10), score: m.score}
	var n int64
	for i := range sources {
		n += above[i].Val()
		if ties[i] != nil {
			for _, id := range ties[i].Val() {
				if before(entry{id: id, score: m.score}, mark) {
					n++
				}
			}
		}
	}
	return n, nil
}
