package feed

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/casebook-dev/casebook/internal/sqlutil"
)

// registry is this process's copy of the celebrity table: authors whose
// posts are pulled at read time. Authors are never demoted (hysteresis: an
// author near the threshold would otherwise flip between modes).
type registry struct {
	mu         sync.RWMutex
	since      map[string]int64 // author → Unix ms of promotion
	loaded     time.Time
	refreshing atomic.Bool
}

// Threshold returns the follower count at and above which an author who
// posts postsPerDay is pulled rather than pushed (CelebrityThreshold, when
// set, instead):
//
//	latency bound   L = PushRate × MaxFanoutDelay        (F/PushRate ≤ MaxFanoutDelay)
//	rate rule       pull pays when postsPerDay > ReadsPerDay × PullCostRatio
//	threshold       T = L                        if the rate rule says push
//	                T = min(PullFloor, L)        if it says pull
//
// The rate rule is Feeding Frenzy's (Silberstein et al., SIGMOD 2010) per
// edge: pushing costs one inbox write per post, pulling one outbox read
// (PullCostRatio writes) per follower read, so an edge is cheaper pulled
// when its producer posts more often than its consumer reads. The follower
// count cancels out of that comparison, so it alone decides nothing for
// small authors; PullFloor keeps them pushed, since every pulled author adds
// a read to each follower's page. The latency bound pulls any author whose
// fan-out could not finish in MaxFanoutDelay at PushRate, whatever the
// rates. With the defaults (200k writes/s, 5 s) T is 1,000,000 followers,
// or 10,000 for an author posting more than 20 times a day.
func (s *Service) Threshold(postsPerDay float64) int64 {
	if s.cfg.CelebrityThreshold > 0 {
		return s.cfg.CelebrityThreshold
	}
	latency := s.cfg.PushRate * s.cfg.MaxFanoutDelay.Seconds()
	l := int64(min(latency, math.MaxInt64/2))
	if postsPerDay > s.cfg.ReadsPerDay*s.cfg.PullCostRatio {
		return max(1, min(s.cfg.PullFloor, l))
	}
	return max(1, l)
}

// celebrities returns the registry, reloading it when older than
// RegistryRefresh (in the background while it is younger than twice that,
// synchronously after).
func (s *Service) celebrities(ctx context.Context) (map[string]int64, error) {
	s.reg.mu.RLock()
	m, age := s.reg.since, s.cfg.Now().Sub(s.reg.loaded)
	s.reg.mu.RUnlock()
	refresh := s.cfg.RegistryRefresh
	switch {
	case m != nil && age < refresh:
		return m, nil
	case m != nil && age < 2*refresh:
		if s.reg.refreshing.CompareAndSwap(false, true) {
			s.wg.Go(func() {
				defer s.reg.refreshing.Store(false)
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refresh)
				defer cancel()
				s.loadRegistry(ctx)
			})
		}
		return m, nil
	}
	return s.loadRegistry(ctx)
}

func (s *Service) loadRegistry(ctx context.Context) (map[string]int64, error) {
	var rows []struct {
		User  string `db:"user_id"`
		Since int64  `db:"since"`
	}
	at := s.cfg.Now()
	if err := s.dbs[0].SelectContext(ctx, &rows, `SELECT user_id, since FROM feed_celebrities`); err != nil {
		return nil, fmt.Errorf("feed: celebrity registry: %w", err)
	}
	m := make(map[string]int64, len(rows))
	for _, r := range rows {
		m[r.User] = r.Since
	}
	s.reg.mu.Lock()
	s.reg.since, s.reg.loaded = m, at
	s.reg.mu.Unlock()
	return m, nil
}

// promote registers author as a celebrity from now on (a second promotion
// keeps the first date).
func (s *Service) promote(ctx context.Context, author string) error {
	q := `INSERT INTO feed_celebrities (user_id, since) VALUES (?, ?)`
	if _, err := s.dbs[0].ExecContext(ctx, q, author, s.nowMs()); err != nil && !sqlutil.IsDuplicate(err) {
		return fmt.Errorf("feed: promote %s: %w", author, err)
	}
	return nil
}

// pulled reports whether a post author makes now is pulled: the author was
// promoted at least two registry refreshes ago, so every reader's process
// already pulls them.
func (s *Service) pulled(reg map[string]int64, author string) bool {
	since, ok := reg[author]
	return ok && since+2*s.cfg.RegistryRefresh.Milliseconds() <= s.nowMs()
}
