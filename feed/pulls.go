package feed

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// pulls keeps the head of each pulled celebrity's outbox in memory: the
// newest ids as read with the outbox's version token before them. A page
// reads the token (a GET) instead of the ids, and uses the ids kept when
// the token is the same: every write of an outbox (outbox.lua, Delete)
// sets a token no other write uses, so an unchanged token is an unchanged
// outbox — a post published with a clock behind the head's, or a delete,
// changes it as a new newest post does. A token lost in a failover reads
// as another (or none: then the ids are read). An entry lives at most ttl
// (LocalTTL), which bounds what a process that writes outboxes without
// tokens (one running an earlier version, during a rolling upgrade) can
// leave unseen.
// maxPulls bounds the outboxes kept.
const maxPulls = 10_000

type pulls struct {
	ttl time.Duration
	max int
	mu  sync.Mutex
	m   map[string]pulled
}

type pulled struct {
	token string   // the outbox's version when ids were read
	ids   []string // its newest ids, newest first
	asked int      // how many were asked for: fewer means the outbox held no more
	until time.Time
}

func newPulls(ttl time.Duration, max int) *pulls {
	return &pulls{ttl: ttl, max: max, m: map[string]pulled{}}
}

// get returns the kept head of author's outbox if it can serve a read of n
// newest ids.
func (c *pulls) get(author string, n int, now time.Time) (pulled, bool) {
	if c == nil {
		return pulled{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.m[author]
	if !ok || !now.Before(p.until) || (n > p.asked && len(p.ids) == p.asked) {
		return pulled{}, false
	}
	return p, true
}

// put keeps ids, the answer to a read of asked newest ids of author's
// outbox made after reading token ("" for none: nothing is kept).
func (c *pulls) put(author, token string, ids []string, asked int, now time.Time) {
	if c == nil || token == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[author]; !ok && len(c.m) >= c.max {
		for k := range c.m { // full: drop one at random (map order)
			delete(c.m, k)
			break
		}
	}
	c.m[author] = pulled{token: token, ids: ids, asked: asked, until: now.Add(c.ttl)}
}

// newToken is a version token for an outbox write: 128 random bits.
func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// views keeps readers' followees and mutes in memory under the view token
// read.lua gave with them: while the token exists unchanged in Redis no
// writer touched either set (each drops it), so a read that presents it is
// answered without the sets. Entries live at most ttl, and the sets kept
// hold at most maxViewMembers names in all.
type views struct {
	ttl     time.Duration
	mu      sync.Mutex
	m       map[string]keptView
	members int
}

// maxViewMembers bounds the names views keep, over all readers.
const maxViewMembers = 1_000_000

type keptView struct {
	token string
	v     view
	until time.Time
}

func newViews(ttl time.Duration) *views { return &views{ttl: ttl, m: map[string]keptView{}} }

func (kv keptView) size() int { return len(kv.v.following) + len(kv.v.muted) + 1 }

// token returns the token reader's kept view is held under ("" for none).
func (c *views) token(reader string, now time.Time) (keptView, bool) {
	if c == nil {
		return keptView{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	kv, ok := c.m[reader]
	if ok && !now.Before(kv.until) {
		delete(c.m, reader)
		c.members -= kv.size()
		ok = false
	}
	return kv, ok
}

// put keeps v for reader under token ("": nothing is kept, and what was
// kept goes).
func (c *views) put(reader, token string, v view, now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[reader]; ok {
		delete(c.m, reader)
		c.members -= old.size()
	}
	if token == "" {
		return
	}
	kv := keptView{token: token, v: v, until: now.Add(c.ttl)}
	if kv.size() > maxViewMembers/10 {
		return
	}
	for k, old := range c.m { // full: drop at random (map order)
		if c.members+kv.size() <= maxViewMembers {
			break
		}
		delete(c.m, k)
		c.members -= old.size()
	}
	c.m[reader] = kv
	c.members += kv.size()
}
