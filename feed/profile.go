package feed

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// profileReader is the reader an AuthorPosts cursor is made for: no user id
// holds a NUL, so a Timeline cursor is never one (with a CursorKey).
func profileReader(author string) string { return "\x00posts:" + author }

// AuthorPosts returns up to n of author's live posts, newest first, after
// cursor ("" for the newest): their profile page. Cursors have Timeline's
// format and guarantees (a (score, id) position, authenticated with
// Config.CursorKey and bound to this author's page; posts published later
// never shift a page) and deleted posts are never shown. Next is "" at the
// end, except that a page ending exactly where the outbox does gives a Next
// whose page may be empty.
//
// The page is read from the author's outbox while it holds posts after the
// cursor (one ZREVRANGEBYSCORE and one batched hydrate per page); where the
// outbox runs out — it keeps the newest OutboxCap posts — the rest comes from
// SQL, one indexed query in the author's shard (ix_profile). So the last page
// of every profile, and every page of one with fewer posts than asked, costs
// one SQL query; a post whose outbox entry a Redis failover lost is missing
// from the outbox part until it is published again with its request id, as
// for Timeline.
//
// Blocks and mutes do not apply: the page is the author's, the same for
// every viewer, and the call has no viewer. A service that hides it from
// users the author blocked checks that before calling.
func (s *Service) AuthorPosts(ctx context.Context, author, cursor string, n int) (_ Page, err error) {
	ctx, call := s.obs.authorPosts.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validUser(author); err != nil {
		return Page{}, err
	}
	if n < 1 || n > MaxPage {
		return Page{}, fmt.Errorf("%w: limit %d (1..%d)", ErrInvalid, n, MaxPage)
	}
	var pos position
	if cursor != "" {
		var err error
		if pos, err = s.cursors.decode(profileReader(author), cursor); err != nil {
			return Page{}, err
		}
	}
	var page Page
	fetch := n + n/4 + 2
	for round := 0; ; round++ {
		es, more, err := s.outboxAfter(ctx, author, pos, fetch)
		if err != nil {
			return Page{}, err
		}
		if len(es) == 0 && more && round < 8 { // a run of equal scores at pos
			fetch *= 2
			continue
		}
		ids := make([]int64, len(es))
		for i, e := range es {
			ids[i], _ = strconv.ParseInt(e.id, 10, 64)
		}
		posts, err := s.hydrate(ctx, ids)
		if err != nil {
			return Page{}, err
		}
		var stale []any
		for i, e := range es {
			p := posts[ids[i]]
			pos = position{score: e.score, id: ids[i]}
			switch {
			case p != nil && p.Deleted: // a relay raced the delete
				stale = append(stale, e.id)
				continue
			case p == nil || p.Author != author:
				continue
			}
			page.Posts = append(page.Posts, *p)
			if len(page.Posts) == n {
				s.dropStale(ctx, author, stale)
				page.Next = s.cursors.encode(profileReader(author), pos)
				return page, nil
			}
		}
		s.dropStale(ctx, author, stale)
		if !more || round == 8 {
			break
		}
	}
	rows, err := s.postsAfter(ctx, author, pos, n-len(page.Posts)+1)
	if err != nil {
		return Page{}, err
	}
	for _, p := range rows {
		if len(page.Posts) == n {
			page.Next = s.cursors.encode(profileReader(author), position{score: page.Posts[n-1].Score, id: page.Posts[n-1].ID})
			break
		}
		page.Posts = append(page.Posts, p)
	}
	return page, nil
}

// outboxAfter returns up to fetch of author's outbox entries after pos, and
// whether the outbox may hold more after them.
func (s *Service) outboxAfter(ctx context.Context, author string, pos position, fetch int) ([]entry, bool, error) {
	max := "+inf"
	if pos.score > 0 {
		max = strconv.FormatInt(pos.score, 10)
	}
	zs, err := s.rdb.ZRevRangeByScoreWithScores(ctx, s.userKey(author, "outbox"), &redis.ZRangeBy{Max: max, Min: "-inf", Count: int64(fetch)}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, fmt.Errorf("feed: read outbox of %s: %w", author, err)
	}
	after := entry{id: strconv.FormatInt(pos.id, 10), score: pos.score}
	out := make([]entry, 0, len(zs))
	for _, z := range zs {
		id, _ := z.Member.(string)
		e := entry{id: id, score: int64(z.Score)}
		if pos.score == 0 || before(after, e) {
			out = append(out, e)
		}
	}
	return out, len(zs) == fetch, nil
}

// dropStale removes deleted posts from author's outbox; a failure is
// retried by the next read.
func (s *Service) dropStale(ctx context.Context, author string, ids []any) {
	if len(ids) > 0 {
		s.rdb.ZRem(ctx, s.userKey(author, "outbox"), ids...)
	}
}

// postsAfter reads up to limit of author's live posts after pos from SQL,
// in timeline order (score, then id, both descending: for ids without
// leading zeros numeric order is the text order Timeline uses).
func (s *Service) postsAfter(ctx context.Context, author string, pos position, limit int) ([]Post, error) {
	if pos.score == 0 {
		pos = position{score: maxScore + 1}
	}
	sh := s.posts.ByGene(s.genes.Of(author))
	var rows []Post
	err := sh.DB.SelectContext(ctx, &rows, postSelect+sh.Table+` WHERE author = ? AND deleted = 0 AND (score < ? OR (score = ? AND id < ?)) ORDER BY score DESC, id DESC LIMIT ?`,
		author, pos.score, pos.score, pos.id, limit)
	if err != nil {
		return nil, fmt.Errorf("feed: read posts of %s: %w", author, err)
	}
	return rows, nil
}
