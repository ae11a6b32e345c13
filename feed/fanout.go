package feed

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/strictjson"
	"github.com/casebook-dev/casebook/outbox"
)

// ChunkVersion is the format version of the fan-out messages this package
// writes and reads.
const ChunkVersion = 1

// Chunk is one fan-out message: a post to push into the inboxes of up to
// ChunkSize followers. It is published keyed by "<post>/<first follower>"
// (so a post's chunks spread over partitions) as JSON:
//
//	{"v":1,"post":8388617,"author":"alice","score":1764480000000123,"followers":["bob","carol"]}
//
// Applying a chunk twice changes nothing (an inbox is a set), so delivery
// may be at-least-once.
type Chunk struct {
	V         int      `json:"v"`
	Post      int64    `json:"post"`
	Author    string   `json:"author"`
	Score     int64    `json:"score"`
	Followers []string `json:"followers"`
}

// maxChunk bounds the followers a decoded chunk may carry.
const maxChunk = 10_000

// maxScore is the largest score a float64 holds exactly (2^53).
const maxScore = 1 << 53

// DecodeChunk parses a fan-out message value strictly: unknown fields, other
// versions, bad ids and empty or oversized follower lists are
// ErrBadMessage, marked outbox.ErrPoison.
func DecodeChunk(value []byte) (Chunk, error) {
	var c Chunk
	if err := strictjson.Decode(value, &c); err != nil {
		return Chunk{}, outbox.Poison(fmt.Errorf("%w: %w", ErrBadMessage, err))
	}
	bad := c.V != ChunkVersion || c.Post <= 0 || c.Score <= 0 || c.Score > maxScore || validUser(c.Author) != nil ||
		len(c.Followers) == 0 || len(c.Followers) > maxChunk
	for _, f := range c.Followers {
		bad = bad || validUser(f) != nil
	}
	if bad {
		return Chunk{}, outbox.Poison(fmt.Errorf("%w: %.200q", ErrBadMessage, value))
	}
	return c, nil
}

// RelayFanout publishes the fan-out of every post waiting for one — up to
// batch posts per shard per call — to topic, as Chunk messages, and marks
// each post sent once all its chunks are acknowledged. It returns how many
// posts it fanned out. A relay that dies in between publishes those chunks
// again (harmless: chunks are idempotent). Run one relay, or several (they
// only add duplicates). Each post is put in its author's outbox before its
// first chunk (Publish's own write may still be on its way), so a reader
// whose inbox opens after the push finds it there: one Redis script call
// per post relayed, beside its SQL UPDATE and its follower pages.
func (s *Service) RelayFanout(ctx context.Context, pub outbox.Publisher, topic string, batch int) (_ int, err error) {
	ctx, call := s.obs.relayFanout.Start(ctx)
	defer func() { err = call.End(err) }()
	if batch < 1 || pub == nil || topic == "" {
		return 0, fmt.Errorf("%w: relay needs a publisher, a topic and a batch ≥ 1 (got %d)", ErrInvalid, batch)
	}
	done := 0
	for _, sh := range s.posts.All() {
		var posts []Post
		err := sh.DB.SelectContext(ctx, &posts, postSelect+sh.Table+` WHERE fanout = ? ORDER BY id LIMIT ?`, fanoutPending, batch)
		if err != nil {
			return done, fmt.Errorf("feed: read posts to fan out: %w", err)
		}
		for _, p := range posts {
			if !p.Deleted {
				// Publish may not have written the outbox yet (its Redis
				// call slow, or failed and not retried): a reader opening
				// an inbox now fills it from the outboxes and would find
				// the post neither there nor pushed. The post goes in
				// before its first chunk.
				if err := s.toOutbox(ctx, p); err != nil {
					return done, fmt.Errorf("feed: record post %d in its author's outbox: %w", p.ID, err)
				}
				if err := s.fanout(ctx, pub, topic, p); err != nil {
					return done, err
				}
			}
			if _, err := sh.DB.ExecContext(ctx, `UPDATE `+sh.Table+` SET fanout = ? WHERE id = ? AND fanout = ?`, fanoutSent, p.ID, fanoutPending); err != nil {
				return done, fmt.Errorf("feed: mark post %d fanned out: %w", p.ID, err)
			}
			done++
		}
	}
	return done, nil
}

// fanout publishes p's chunks, reading its author's followers a page at a
// time and publishing every 64 chunks.
func (s *Service) fanout(ctx context.Context, pub outbox.Publisher, topic string, p Post) error {
	const perPublish = 64
	var msgs []outbox.Message
	after := ""
	for {
		page, err := s.followers(ctx, p.Author, after, s.cfg.ChunkSize*perPublish)
		if err != nil {
			return err
		}
		for i := 0; i < len(page); i += s.cfg.ChunkSize {
			part := page[i:min(i+s.cfg.ChunkSize, len(page))]
			v, _ := json.Marshal(Chunk{V: ChunkVersion, Post: p.ID, Author: p.Author, Score: p.Score, Followers: part})
			msgs = append(msgs, outbox.Message{Topic: topic, Key: []byte(strconv.FormatInt(p.ID, 10) + "/" + part[0]), Value: v})
		}
		if len(msgs) > 0 && (len(msgs) >= perPublish || len(page) < s.cfg.ChunkSize*perPublish) {
			if err := pub.Publish(ctx, msgs); err != nil {
				return fmt.Errorf("feed: publish fan-out of post %d: %w", p.ID, err)
			}
			msgs = msgs[:0]
		}
		if len(page) < s.cfg.ChunkSize*perPublish {
			return nil
		}
		after = page[len(page)-1]
	}
}

// HandleChunk is the fan-out consumer, an outbox.Handler: it pushes the
// chunk's post to every follower who has an inbox (the active readers), in
// one pipeline. Malformed chunks, and chunks that contradict their post
// (see Push), are poison; a Redis error is transient (the whole chunk is
// retried, which is idempotent).
func (s *Service) HandleChunk(ctx context.Context, _, value []byte) (err error) {
	ctx, call := s.obs.handleChunk.Start(ctx)
	defer func() { err = call.End(err) }()
	c, err := DecodeChunk(value)
	if err != nil {
		return err
	}
	_, err = s.push(ctx, c)
	return err
}

// Push applies one chunk and returns how many inboxes took the post.
//
// A push is one RPUSHX of "score:id" to the reader's pushed list, which
// exists exactly while their inbox does (open creates both, a read refreshes
// both), so RPUSHX is the "active readers only" test without a script: a
// script call per inbox costs the server several times a ZADD. The next read
// moves the list into the inbox (read.lua), where duplicates collapse, so a
// chunk applied twice shows nothing twice. A list grown past
// InboxCap+InboxSlack by an active reader who has not read meanwhile keeps
// its last InboxCap pushes.
//
// The score pushed is the post's own, read through the post cache (a miss
// there is read again from SQL, so a miss cached before the post existed
// does not drop its fan-out): a chunk is only a list of followers for a
// post. One whose post does not exist, or
// whose author or score is not the post's, is ErrBadMessage (poison) and
// pushes nothing; one whose post was deleted pushes nothing.
func (s *Service) Push(ctx context.Context, c Chunk) (_ int, err error) {
	ctx, call := s.obs.push.Start(ctx)
	defer func() { err = call.End(err) }()
	return s.push(ctx, c)
}

func (s *Service) push(ctx context.Context, c Chunk) (int, error) {
	posts, err := s.hydrate(ctx, []int64{c.Post})
	if err != nil {
		return 0, err
	}
	p := posts[c.Post]
	if p == nil { // a cached miss may predate the post (ids are guessable): SQL decides
		if posts, err = s.load(ctx, []int64{c.Post}); err != nil {
			return 0, err
		}
		p = posts[c.Post]
	}
	switch {
	case p == nil:
		return 0, outbox.Poison(fmt.Errorf("%w: chunk of post %d, which does not exist", ErrBadMessage, c.Post))
	case p.Author != c.Author || p.Score != c.Score:
		return 0, outbox.Poison(fmt.Errorf("%w: chunk of post %d by %q at score %d; the post is by %q at %d",
			ErrBadMessage, c.Post, c.Author, c.Score, p.Author, p.Score))
	case p.Deleted:
		return 0, nil
	}
	var item any = strconv.FormatInt(p.Score, 10) + ":" + strconv.FormatInt(p.ID, 10) // boxed once, not per follower
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(c.Followers))
	for i, f := range c.Followers {
		cmds[i] = pipe.RPushX(ctx, s.userKey(f, "pushed"), item)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("feed: push post %d: %w", c.Post, err)
	}
	if s.obs.block.Metering() {
		s.obs.delay.Record(ctx, max(0, float64(s.nowMs()-p.CreatedAt)/1000))
	}
	n := 0
	var trim redis.Pipeliner
	for i, cmd := range cmds {
		l := cmd.Val()
		if l > 0 {
			n++
		}
		if l > int64(1+s.cfg.InboxCap+s.cfg.InboxSlack) {
			if trim == nil {
				trim = s.rdb.Pipeline()
			}
			trim.LTrim(ctx, s.userKey(c.Followers[i], "pushed"), int64(-s.cfg.InboxCap), -1)
		}
	}
	if trim != nil {
		if _, err := trim.Exec(ctx); err != nil {
			return n, fmt.Errorf("feed: trim pushed posts: %w", err)
		}
	}
	return n, nil
}
