package shortlink

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed visits.lua
var visitsLua string

var visitsScript = redis.NewScript(visitsLua)

//go:embed linkset.lua
var linkSetLua string

var linkSetScript = redis.NewScript(linkSetLua)

// CacheStats counts where lookups were answered.
type CacheStats struct {
	LocalHits, RedisHits, SQLReads int64
}

// CacheStats returns this process's lookup counters since New.
func (s *Service) CacheStats() CacheStats {
	c := &s.stats
	return CacheStats{
		LocalHits: c[layerLocal][resultHit].Load() + c[layerLocal][resultNegative].Load(),
		RedisHits: c[layerRedis][resultHit].Load() + c[layerRedis][resultNegative].Load(),
		SQLReads:  c[layerSQL][resultHit].Load() + c[layerSQL][resultMiss].Load() + c[layerSQL][resultError].Load(),
	}
}

// cached is a local cache entry; a nil link remembers a miss.
type cached struct{ link *Link }

// negative is the Redis value remembering a miss.
const negative = "-"

// lookup reads a link through the in-process cache, then Redis, then SQL.
// Misses are remembered at both cache levels for NegativeTTL, and concurrent
// misses of one code share one Redis read and one SQL query (singleflight),
// so a hot code never stampedes the database.
func (s *Service) lookup(ctx context.Context, code string) (*Link, error) {
	if s.cfg.LocalTTL > 0 {
		if c, ok := s.local.Get(code); ok {
			if c.link == nil {
				s.stats.add(layerLocal, resultNegative)
				return nil, ErrNotFound
			}
			s.stats.add(layerLocal, resultHit)
			return c.link, nil
		}
		s.stats.add(layerLocal, resultMiss)
	}
	v, err, _ := s.flight.Do(code, func() (any, error) {
		l, err := s.lookupShared(ctx, code)
		if err == nil || errors.Is(err, ErrNotFound) {
			s.remember(code, l)
		}
		return l, err
	})
	if err != nil {
		return nil, err
	}
	return v.(*Link), nil
}

func (s *Service) lookupShared(ctx context.Context, code string) (*Link, error) {
	key := s.space.Key(code, "link")
	raw, err := s.rdb.Get(ctx, key).Result()
	switch {
	case err == nil && raw == negative:
		s.stats.add(layerRedis, resultNegative)
		return nil, ErrNotFound
	case err == nil:
		var l Link
		// Version 0: an entry from before versions, which an edit's
		// compare-and-set cannot order; read the row again.
		if err := json.Unmarshal([]byte(raw), &l); err == nil && l.Version > 0 {
			s.stats.add(layerRedis, resultHit)
			return &l, nil
		}
		// A value this version cannot read: fall through to SQL.
	case !errors.Is(err, redis.Nil):
		s.stats.add(layerRedis, resultError)
		return nil, fmt.Errorf("shortlink: cache read: %w", err)
	}
	s.stats.add(layerRedis, resultMiss)
	r, err := s.load(ctx, code)
	if errors.Is(err, ErrNotFound) {
		s.stats.add(layerSQL, resultMiss)
		s.rdb.Set(ctx, key, negative, s.cfg.NegativeTTL)
		return nil, ErrNotFound
	}
	if err != nil {
		s.stats.add(layerSQL, resultError)
		return nil, err
	}
	s.stats.add(layerSQL, resultHit)
	l := s.linkOf(r)
	s.fill(ctx, l) // a failed fill costs the next lookup a SQL read, nothing more
	return l, nil
}

// fill stores l in Redis unless Redis holds the same or a newer version of
// it: a reader that read the row before an edit committed cannot replace
// the edit's entry with the old link.
func (s *Service) fill(ctx context.Context, l *Link) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	ttl := s.ttl(l, s.cfg.RedisTTL)
	return linkSetScript.Run(ctx, s.rdb, []string{s.space.Key(s.keyOf(l), "link")}, l.Version, b, ttl.Milliseconds()).Err()
}

// remember puts a link (nil for a miss) in the local cache.
func (s *Service) remember(code string, l *Link) {
	if s.cfg.LocalTTL <= 0 {
		return
	}
	ttl := s.cfg.NegativeTTL
	if l != nil {
		if c, ok := s.local.Get(code); ok && c.link != nil && c.link.Version > l.Version {
			return // an edit put a newer version here while l was read
		}
		ttl = s.ttl(l, s.cfg.LocalTTL)
	}
	s.local.SetWithTTL(code, &cached{link: l}, 1, min(ttl, s.cfg.LocalTTL))
}

// ttl caps d at the time left before l expires (at least 1 ms: a zero TTL
// means "forever" to both caches).
func (s *Service) ttl(l *Link, d time.Duration) time.Duration {
	if l.ExpiresAt.IsZero() {
		return d
	}
	return max(time.Millisecond, min(d, l.ExpiresAt.Sub(s.cfg.Now())))
}

// forget drops code from both caches (after a create or delete), so a
// remembered miss or a deleted link is not served on.
func (s *Service) forget(ctx context.Context, code string) error {
	s.local.Del(code)
	if err := s.rdb.Del(ctx, s.space.Key(code, "link"), s.space.Key(code, "visits")).Err(); err != nil {
		return fmt.Errorf("shortlink: cache invalidation: %w", err)
	}
	return nil
}

// visit counts one visit of a link with a limit, atomically in Redis. The
// counter is seeded from SQL's click count when Redis does not have it (first
// visit, or lost in a failover); visits counted but not yet flushed elsewhere
// can then be granted again, which is the price of not taking a row lock per
// redirect. A random request id makes the script safe to run twice: a call
// whose reply is lost and that go-redis sends again counts once.
func (s *Service) visit(ctx context.Context, l *Link) error {
	life := s.visitLife(l)
	request := strconv.FormatUint(rand.Uint64(), 36)
	keys := []string{s.space.Key(s.keyOf(l), "visits"), s.space.Key(s.keyOf(l), "visit", request)}
	n, err := visitsScript.Run(ctx, s.rdb, keys, l.MaxVisits, "", life.Milliseconds(), visitMarkerLife.Milliseconds()).Int64()
	if err == nil && n == -2 {
		var seed int64
		if seed, err = s.storedClicks(ctx, s.keyOf(l), false, ""); err != nil {
			return err
		}
		n, err = visitsScript.Run(ctx, s.rdb, keys, l.MaxVisits, seed, life.Milliseconds(), visitMarkerLife.Milliseconds()).Int64()
	}
	if err != nil {
		return fmt.Errorf("shortlink: count visit: %w", err)
	}
	if n < 0 {
		return ErrMaxVisits
	}
	return nil
}

// visitLife is how long l's visit counter is kept: until l expires, or for 30
// days from its first visit (re-seeded from the clicks after).
func (s *Service) visitLife(l *Link) time.Duration {
	if l.ExpiresAt.IsZero() {
		return 30 * 24 * time.Hour
	}
	return max(time.Millisecond, l.ExpiresAt.Sub(s.cfg.Now()))
}

// visitMarkerLife is how long a visit's request id is remembered: well past
// go-redis' retries of a call (MaxRetries × ReadTimeout, 9 s by default).
const visitMarkerLife = time.Minute

// visitsLeft returns ErrMaxVisits when l has no visit left, spending none.
func (s *Service) visitsLeft(ctx context.Context, l *Link) error {
	n, err := s.rdb.Get(ctx, s.space.Key(s.keyOf(l), "visits")).Int64()
	if errors.Is(err, redis.Nil) { // not counted in Redis (yet): SQL has the flushed visits
		n, err = s.storedClicks(ctx, s.keyOf(l), false, "")
	}
	if err != nil {
		return fmt.Errorf("shortlink: read visits: %w", err)
	}
	if n >= l.MaxVisits {
		return ErrMaxVisits
	}
	return nil
}
