package shortlink

import (
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
)

// missFilter is the local miss filter (on unless Config.SharedMissCheck): the clients that missed (or were
// refused) through this Service within the time their miss budget takes to
// refill. A client not in it has spent no miss here since then, so its
// budget is full unless it spent it through another process; only clients
// in it have their budget read from Redis before each lookup.
//
// It holds at most maxClients; while it is full, every client is checked in
// Redis, as without the filter, until entries expire — never fewer checks.
type missFilter struct {
	refill time.Duration // a whole budget's refill: Burst × Period / Rate
	shards [64]missShard
	max    int // per shard
}

type missShard struct {
	mu      sync.Mutex
	until   map[string]int64 // client key → Unix ns when its budget is full again
	swept   int64
	overrun bool // a client could not be added: check everyone until a sweep frees room
}

func newMissFilter(refill time.Duration, maxClients int) *missFilter {
	f := &missFilter{refill: refill, max: max(1, maxClients/64)}
	for i := range f.shards {
		f.shards[i].until = map[string]int64{}
	}
	return f
}

func (f *missFilter) shard(key string) *missShard { return &f.shards[xxhash.Sum64String(key)%64] }

// suspect reports whether ip's budget must be read from Redis: there is no
// filter (nil: always), the client missed here within the refill time, or
// the shard could not track every client.
func (f *missFilter) suspect(ip string, now time.Time) bool {
	if f == nil {
		return true
	}
	key := clientKey(ip)
	sh := f.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.overrun {
		sh.sweep(now.UnixNano(), f.max)
		if sh.overrun {
			return true
		}
	}
	until, ok := sh.until[key]
	return ok && now.UnixNano() < until
}

// missed records that ip spent (or was refused) a miss at now; a nil
// filter records nothing.
func (f *missFilter) missed(ip string, now time.Time) {
	if f == nil {
		return
	}
	key := clientKey(ip)
	sh := f.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.until[key]; !ok && len(sh.until) >= f.max {
		sh.sweep(now.UnixNano(), f.max)
		if len(sh.until) >= f.max {
			sh.overrun = true
			return
		}
	}
	sh.until[key] = now.Add(f.refill).UnixNano()
}

// sweep drops expired entries, at most once a second, and clears overrun
// once there is room again.
func (sh *missShard) sweep(now int64, max int) {
	if now-sh.swept < int64(time.Second) {
		return
	}
	sh.swept = now
	for k, until := range sh.until {
		if now >= until {
			delete(sh.until, k)
		}
	}
	if len(sh.until) < max {
		sh.overrun = false
	}
}
