package feed

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/luascript"
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
	d := json.NewDecoder(bytes.NewReader(value))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return Chunk{}, outbox.Poison(fmt.Errorf("%w: %w", ErrBadMessage, err))
	}
	if d.More() {
		return Chunk{}, outbox.Poison(fmt.Errorf("%w: trailing data", ErrBadMessage))
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
// only add duplicates).
func (s *Service) RelayFanout(ctx context.Context, pub outbox.Publisher, topic string, batch int) (int, error) {
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

var (
	//go:embed push.lua
	pushLua    string
	pushScript = redis.NewScript(pushLua)
)

// HandleChunk is the fan-out consumer, an outbox.Handler: it pushes the
// chunk's post into the inbox of every follower who has one (the active
// readers), in one pipeline. Malformed chunks are poison; a Redis error is
// transient (the whole chunk is retried, which is idempotent).
func (s *Service) HandleChunk(ctx context.Context, _, value []byte) error {
	c, err := DecodeChunk(value)
	if err != nil {
		return err
	}
	_, err = s.Push(ctx, c)
	return err
}

// Push applies one chunk and returns how many inboxes took the post.
func (s *Service) Push(ctx context.Context, c Chunk) (int, error) {
	calls := make([]luascript.Call, len(c.Followers))
	args := []any{c.Post, c.Score, s.cfg.InboxCap, s.cfg.InboxSlack}
	for i, f := range c.Followers {
		calls[i] = luascript.Call{Script: pushScript, Keys: []string{s.userKey(f, "inbox")}, Args: args}
	}
	cmds, err := luascript.RunAll(ctx, s.rdb, calls)
	if err != nil {
		return 0, fmt.Errorf("feed: push post %d: %w", c.Post, err)
	}
	n := 0
	for _, cmd := range cmds {
		if v, err := cmd.Int(); err == nil && v == 1 {
			n++
		} else if err != nil && !errors.Is(err, redis.Nil) {
			return n, fmt.Errorf("feed: push post %d: %w", c.Post, err)
		}
	}
	return n, nil
}
