package feed

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/shard"
)

// Post is a post as recorded in SQL.
type Post struct {
	ID        int64  `db:"id" json:"id"`
	Author    string `db:"author" json:"author"`
	Body      string `db:"body" json:"body"`
	CreatedAt int64  `db:"created_at" json:"at"` // Unix ms
	Score     int64  `db:"score" json:"score"`   // timeline order: CreatedAt×1000 + id base mod 1000
	Deleted   bool   `db:"deleted" json:"deleted,omitempty"`
}

// PublishRequest asks to publish Body as Author.
type PublishRequest struct {
	Author string
	// RequestID makes the publish idempotent per author (1..64 printable
	// ASCII): publishing again with it returns the first post.
	RequestID string
	Body      string // UTF-8, 1..MaxBody bytes
}

// Fan-out states of a post row.
const (
	fanoutPending = 0
	fanoutSent    = 1
	fanoutPulled  = 2
)

const postSelect = `SELECT id, author, body, created_at, score, deleted FROM `

var (
	//go:embed outbox.lua
	outboxLua    string
	outboxScript = redis.NewScript(outboxLua)
)

// Publish records a post in SQL (in its author's shard; the id carries the
// author's gene) and in the author's outbox. Its fan-out is left to
// RelayFanout, which finds it in SQL, unless the author is a celebrity, whose
// posts are pulled at read time. If Redis fails after the SQL write, the
// error says so and publishing again with the same request id finishes.
func (s *Service) Publish(ctx context.Context, r PublishRequest) (_ Post, err error) {
	ctx, call := s.obs.publish.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validUser(r.Author); err != nil {
		return Post{}, err
	}
	if err := validUser(r.RequestID); err != nil {
		return Post{}, fmt.Errorf("%w: request id %q", ErrInvalid, r.RequestID)
	}
	if r.Body == "" || len(r.Body) > s.cfg.MaxBody || !utf8.ValidString(r.Body) {
		return Post{}, fmt.Errorf("%w: body of %d bytes (1..%d, UTF-8)", ErrInvalid, len(r.Body), s.cfg.MaxBody)
	}
	sh := s.posts.ByGene(s.genes.Of(r.Author))
	p, err := s.byRequest(ctx, sh, r.Author, r.RequestID)
	if errors.Is(err, ErrNotFound) {
		p, err = s.insert(ctx, sh, r)
	}
	if err != nil {
		return Post{}, err
	}
	if p.Deleted {
		return p, nil
	}
	err = s.toOutbox(ctx, p)
	if err == nil {
		err = s.cache(ctx, &p, false)
	}
	if err != nil {
		return p, fmt.Errorf("feed: post %d is recorded but not in its author's outbox (publish again with the same request id): %w", p.ID, err)
	}
	return p, nil
}

// toOutbox records p in its author's outbox (again is a no-op).
func (s *Service) toOutbox(ctx context.Context, p Post) error {
	return outboxScript.Run(ctx, s.rdb, []string{s.userKey(p.Author, "outbox"), s.userKey(p.Author, "outver")}, p.ID, p.Score, s.cfg.OutboxCap, max(1, s.cfg.OutboxCap/10), newToken()).Err()
}

func (s *Service) insert(ctx context.Context, sh shard.Shard, r PublishRequest) (Post, error) {
	mode, err := s.fanoutMode(ctx, r.Author)
	if err != nil {
		return Post{}, err
	}
	id, err := s.newID(ctx, r.Author)
	if err != nil {
		return Post{}, err
	}
	now := s.nowMs()
	p := Post{ID: id, Author: r.Author, Body: r.Body, CreatedAt: now, Score: now*1000 + s.genes.Base(id)%1000}
	_, err = sh.DB.ExecContext(ctx, `INSERT INTO `+sh.Table+` (id, author, request_id, body, created_at, score, deleted, fanout) VALUES (?, ?, ?, ?, ?, ?, 0, ?)`,
		p.ID, p.Author, r.RequestID, p.Body, p.CreatedAt, p.Score, mode)
	if err != nil {
		if p, derr := s.byRequest(ctx, sh, r.Author, r.RequestID); derr == nil { // a concurrent twin won
			return p, nil
		}
		return Post{}, fmt.Errorf("feed: record post: %w", err)
	}
	return p, nil
}

// fanoutMode decides whether author's next post is pushed or pulled, and
// promotes an author who crossed Threshold (whose posts are still pushed
// until every process knows, see Config.RegistryRefresh).
func (s *Service) fanoutMode(ctx context.Context, author string) (int, error) {
	reg, err := s.celebrities(ctx)
	if err != nil {
		return 0, err
	}
	if s.pulled(reg, author) {
		return fanoutPulled, nil
	}
	if _, ok := reg[author]; ok {
		return fanoutPending, nil
	}
	followers, err := s.followerCount(ctx, author)
	if err != nil {
		return 0, err
	}
	dayAgo := (s.nowMs() - 24*3600*1000) * 1000
	perDay, err := s.rdb.ZCount(ctx, s.userKey(author, "outbox"), strconv.FormatInt(dayAgo, 10), "+inf").Result()
	if err != nil {
		return 0, fmt.Errorf("feed: posting rate of %s: %w", author, err)
	}
	if followers >= s.Threshold(float64(perDay+1)) {
		if err := s.promote(ctx, author); err != nil {
			return 0, err
		}
	}
	return fanoutPending, nil
}

func (s *Service) byRequest(ctx context.Context, sh shard.Shard, author, request string) (Post, error) {
	var p Post
	err := sh.DB.GetContext(ctx, &p, postSelect+sh.Table+` WHERE author = ? AND request_id = ?`, author, request)
	if errors.Is(err, sql.ErrNoRows) {
		return Post{}, ErrNotFound
	}
	if err != nil {
		return Post{}, fmt.Errorf("feed: read post: %w", err)
	}
	return p, nil
}

// Delete deletes author's post id: at once from SQL (a tombstone), the
// caches and the author's outbox; inboxes drop it lazily, at read (a
// timeline never shows a deleted post). Deleting again is a no-op; a post
// that is not author's returns ErrNotFound.
func (s *Service) Delete(ctx context.Context, author string, id int64) (err error) {
	ctx, call := s.obs.delete.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := validUser(author); err != nil {
		return err
	}
	if id <= 0 {
		return fmt.Errorf("%w: post id %d", ErrInvalid, id)
	}
	sh := s.shardOfPost(id)
	var p Post
	err = sh.DB.GetContext(ctx, &p, postSelect+sh.Table+` WHERE id = ? AND author = ?`, id, author)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %d by %s", ErrNotFound, id, author)
	}
	if err != nil {
		return fmt.Errorf("feed: read post: %w", err)
	}
	if _, err := sh.DB.ExecContext(ctx, `UPDATE `+sh.Table+` SET deleted = 1 WHERE id = ?`, id); err != nil {
		return fmt.Errorf("feed: delete post: %w", err)
	}
	p.Deleted, p.Body = true, ""
	if s.local != nil {
		s.local.Del(id)
	}
	if err := s.cache(ctx, &p, false); err != nil {
		return err
	}
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, s.userKey(author, "outbox"), id)
		p.Set(ctx, s.userKey(author, "outver"), newToken(), 0)
		return nil
	}); err != nil {
		return fmt.Errorf("feed: remove post from outbox: %w", err)
	}
	if s.local != nil {
		s.local.Del(id) // a reader may have cached the live post meanwhile
	}
	return nil
}

// Post returns the post id (ErrNotFound when missing or deleted).
func (s *Service) Post(ctx context.Context, id int64) (_ Post, err error) {
	ctx, call := s.obs.post.Start(ctx)
	defer func() { err = call.End(err) }()
	m, err := s.hydrate(ctx, []int64{id})
	if err != nil {
		return Post{}, err
	}
	p := m[id]
	if p == nil || p.Deleted {
		return Post{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	return *p, nil
}

// negative is the Redis value remembering a post that does not exist.
const negative = "-"

// cache writes p to Redis: over whatever is there (after a write) or, with
// onlyNew, only where nothing is (a reader's fill, which must never
// overwrite a delete's tombstone with the live post it read before).
func (s *Service) cache(ctx context.Context, p *Post, onlyNew bool) error {
	b, _ := json.Marshal(p) // strings and ints: cannot fail
	var err error
	if onlyNew {
		err = s.rdb.SetNX(ctx, s.postKey(p.ID), b, s.cfg.CacheTTL).Err()
	} else {
		err = s.rdb.Set(ctx, s.postKey(p.ID), b, s.cfg.CacheTTL).Err()
	}
	if err != nil {
		return fmt.Errorf("feed: cache post %d: %w", p.ID, err)
	}
	return nil
}

// hydrate reads posts through the local cache, then Redis (one pipeline),
// then SQL (one query per shard); a missing post maps to nil. Misses are
// remembered at both cache levels for NegativeTTL.
func (s *Service) hydrate(ctx context.Context, ids []int64) (map[int64]*Post, error) {
	out := make(map[int64]*Post, len(ids))
	var miss []int64
	for _, id := range ids {
		if s.local != nil {
			if p, ok := s.local.Get(id); ok {
				out[id] = p
				continue
			}
		}
		miss = append(miss, id)
	}
	if s.local != nil {
		s.obs.looked(ctx, len(ids)-len(miss), s.obs.localHit)
		s.obs.looked(ctx, len(miss), s.obs.localMiss)
	}
	if len(miss) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(miss))
	for i, id := range miss {
		cmds[i] = pipe.Get(ctx, s.postKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("feed: read cached posts: %w", err)
	}
	var cold []int64
	for i, cmd := range cmds {
		raw, err := cmd.Result()
		if err != nil {
			cold = append(cold, miss[i])
			continue
		}
		var p *Post
		if raw != negative {
			p = new(Post)
			if json.Unmarshal([]byte(raw), p) != nil || p.ID != miss[i] {
				cold = append(cold, miss[i]) // a value this version cannot read
				continue
			}
		}
		out[miss[i]] = p
		s.remember(miss[i], p)
	}
	s.obs.looked(ctx, len(miss)-len(cold), s.obs.redisHit)
	s.obs.looked(ctx, len(cold), s.obs.redisMiss)
	if len(cold) == 0 {
		return out, nil
	}
	loaded, err := s.load(ctx, cold)
	if err != nil {
		return nil, err
	}
	for _, id := range cold {
		out[id] = loaded[id]
	}
	return out, nil
}

// load reads posts from SQL, one query per shard, and fills both caches.
// Concurrent loads of the same ids share one query (singleflight).
func (s *Service) load(ctx context.Context, ids []int64) (map[int64]*Post, error) {
	byShard := map[int][]int64{}
	for _, id := range ids {
		i := s.shardOfPost(id).Index
		byShard[i] = append(byShard[i], id)
	}
	out := make(map[int64]*Post, len(ids))
	for _, group := range byShard {
		slices.Sort(group)
		var key strings.Builder
		key.WriteString("posts")
		for _, id := range group {
			key.WriteByte(':')
			key.WriteString(strconv.FormatInt(id, 10))
		}
		v, err, _ := s.flight.Do(key.String(), func() (any, error) { return s.loadShard(ctx, group) })
		if err != nil {
			return nil, err
		}
		for id, p := range v.(map[int64]*Post) {
			out[id] = p
		}
	}
	return out, nil
}

func (s *Service) loadShard(ctx context.Context, ids []int64) (map[int64]*Post, error) {
	sh := s.shardOfPost(ids[0])
	q, args, err := sqlx.In(postSelect+sh.Table+` WHERE id IN (?)`, ids)
	if err != nil {
		return nil, err
	}
	var rows []Post
	if err := sh.DB.SelectContext(ctx, &rows, sh.DB.Rebind(q), args...); err != nil {
		return nil, fmt.Errorf("feed: read posts: %w", err)
	}
	s.obs.looked(ctx, len(rows), s.obs.sqlHit)
	s.obs.looked(ctx, len(ids)-len(rows), s.obs.sqlMiss)
	out := make(map[int64]*Post, len(ids))
	for i := range rows {
		p := &rows[i]
		if p.Deleted {
			p.Body = ""
		}
		out[p.ID] = p
		if err := s.cache(ctx, p, true); err != nil {
			return nil, err
		}
		s.remember(p.ID, p)
	}
	for _, id := range ids {
		if out[id] == nil {
			out[id] = nil
			s.rdb.SetNX(ctx, s.postKey(id), negative, s.cfg.NegativeTTL)
			s.remember(id, nil)
		}
	}
	return out, nil
}

// remember keeps p (nil for a miss) in the local cache. A post found
// replaces a miss remembered a moment before (Push reads a stale Redis miss,
// then finds the post in SQL): ristretto applies sets in the background and
// drops a new key's set when the key is already admitted, so the found post
// is set after a Del, which is ordered with the pending sets.
func (s *Service) remember(id int64, p *Post) {
	if s.local == nil {
		return
	}
	ttl := s.cfg.LocalTTL
	if p == nil {
		ttl = min(ttl, s.cfg.NegativeTTL)
	} else {
		s.local.Del(id)
	}
	s.local.SetWithTTL(id, p, 1, ttl)
}
