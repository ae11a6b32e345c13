package feed

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// A process keeps two things in memory beside the posts, each checked
// against a token in Redis at every read that uses it:
//
// The head of each pulled celebrity's outbox: the newest ids, read with the
// outbox's version token before them. A page reads the token (a GET)
// instead of the ids, and uses the ids kept when the token is the same:
// every write of an outbox (outbox.lua, Delete) sets a token no other write
// uses, so an unchanged token is an unchanged outbox — a post published
// with a clock behind the head's, or a delete, changes it as a new newest
// post does. A token lost in a failover reads as another (or none: then
// the ids are read).
//
// Each reader's followees and mutes, under the view token read.lua gave
// with them: while the token exists unchanged in Redis no writer touched
// either set (each drops it), so a read that presents it is answered
// without the sets.
//
// An entry lives at most LocalTTL, which bounds what a process that writes
// without tokens (one running an earlier version, during a rolling
// upgrade) can leave unseen.

// maxPulls bounds the outboxes kept; maxViewMembers the names kept in
// readers' views, over all readers.
const (
	maxPulls       = 10_000
	maxViewMembers = 1_000_000
)

type pulled struct {
	token string   // the outbox's version when ids were read
	ids   []string // its newest ids, newest first
	asked int      // how many were asked for: fewer means the outbox held no more
}

// serves reports whether p answers a read of the n newest ids.
func (p pulled) serves(n int) bool { return n <= p.asked || len(p.ids) < p.asked }

type keptView struct {
	token string
	v     view
}

func (kv keptView) size() int { return len(kv.v.following) + len(kv.v.muted) + 1 }

func newPulls(ttl time.Duration) *kept[pulled] {
	return newKept(ttl, maxPulls, func(pulled) int { return 1 })
}

func newViews(ttl time.Duration) *kept[keptView] {
	return newKept(ttl, maxViewMembers, keptView.size)
}

// kept is a map of entries that live at most ttl, bounded by their total
// cost: when a new entry does not fit, entries go at random (map order).
// An entry costing over a tenth of the bound is not kept. A nil *kept
// keeps nothing.
type kept[V any] struct {
	ttl  time.Duration
	max  int
	cost func(V) int
	mu   sync.Mutex
	m    map[string]keptEntry[V]
	used int
}

type keptEntry[V any] struct {
	v     V
	until time.Time
}

func newKept[V any](ttl time.Duration, max int, cost func(V) int) *kept[V] {
	return &kept[V]{ttl: ttl, max: max, cost: cost, m: map[string]keptEntry[V]{}}
}

func (c *kept[V]) get(key string, now time.Time) (V, bool) {
	var zero V
	if c == nil {
		return zero, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		return zero, false
	}
	if !now.Before(e.until) {
		c.remove(key, e)
		return zero, false
	}
	return e.v, true
}

// put keeps v under key in place of what was there.
func (c *kept[V]) put(key string, v V, now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forget(key)
	cost := c.cost(v)
	if cost > c.max/10 {
		return
	}
	for k, old := range c.m {
		if c.used+cost <= c.max {
			break
		}
		c.remove(k, old)
	}
	c.m[key] = keptEntry[V]{v: v, until: now.Add(c.ttl)}
	c.used += cost
}

// drop forgets key.
func (c *kept[V]) drop(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forget(key)
}

func (c *kept[V]) forget(key string) {
	if old, ok := c.m[key]; ok {
		c.remove(key, old)
	}
}

func (c *kept[V]) remove(key string, e keptEntry[V]) {
	delete(c.m, key)
	c.used -= c.cost(e.v)
}

// newToken is a version token for an outbox write: 128 random bits.
func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
