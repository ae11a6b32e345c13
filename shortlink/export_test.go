package shortlink

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// WaitLocal waits until the local cache has applied every write made so
// far (ristretto applies them in the background), so that a test can tell
// which layer answers next.
func (s *Service) WaitLocal() { s.local.Wait() }

// ResolveUninstrumented is Resolve without its span and counters, the
// baseline BenchmarkObservability measures their cost against.
func (s *Service) ResolveUninstrumented(ctx context.Context, code string) (*Link, error) {
	return s.resolveWith(ctx, code, ResolveOptions{})
}

// FillRedis stores l in Redis as a lookup that read it from SQL does, so
// that a test can play a slow reader filling an old row after an edit.
func (s *Service) FillRedis(ctx context.Context, l *Link) error { return s.fill(ctx, l) }

// RememberLocal stores l in the local cache as a lookup that read it does.
func (s *Service) RememberLocal(l *Link) { s.remember(l.Code, l); s.local.Wait() }

// FlushAnalytics runs one analytics flush now, as the flusher does every
// FlushEvery.
func (s *Service) FlushAnalytics(ctx context.Context) error { return s.analytics.flush(ctx) }

// LoseAnalyticsReplies makes the next n parts of analytics batches fail
// after their transaction committed, as a commit whose reply was lost.
func (s *Service) LoseAnalyticsReplies(n int) {
	a := s.analytics
	a.flushMu.Lock()
	defer a.flushMu.Unlock()
	left := n
	a.afterWrite = func(int) error {
		if left == 0 {
			return nil
		}
		left--
		return errLostReply
	}
}

var errLostReply = errors.New("test: the commit's reply was lost")

// AnalyticsPending reports whether a failed batch is kept for the next
// flush.
func (s *Service) AnalyticsPending() bool {
	s.analytics.flushMu.Lock()
	defer s.analytics.flushMu.Unlock()
	return s.analytics.pending != nil
}

// AnalyticsMemory is the number of values the live rollup holds, over
// every link, hour and dimension.
func (s *Service) AnalyticsMemory() (hours, values int) {
	a := s.analytics
	for i := range a.stripes {
		st := &a.stripes[i]
		st.mu.Lock()
		for _, h := range st.live.hours {
			hours++
			for _, set := range h.values {
				values += len(set.list)
			}
		}
		st.mu.Unlock()
	}
	return hours, values
}

// AnalyticsLastCut is the size of the last batch cut: link tables
// (transactions), rollup rows and HyperLogLog keys.
func (s *Service) AnalyticsLastCut() (parts, rows, keys int) {
	s.analytics.flushMu.Lock()
	defer s.analytics.flushMu.Unlock()
	c := s.analytics.lastCut
	return c.parts, c.rows, c.keys
}

// RecordClick records a click on code (a link to dest) from r and ip in
// the rollup, as a redirect does, without looking the code up.
func (s *Service) RecordClick(code, dest string, r *http.Request, ip string) {
	s.analytics.add(s.newClick(&Link{Code: code, URL: dest}, r, ip))
}

// DiscardAnalytics drops the live rollup unwritten.
func (s *Service) DiscardAnalytics() {
	for i := range s.analytics.stripes {
		st := &s.analytics.stripes[i]
		st.mu.Lock()
		st.live = newRollup()
		st.mu.Unlock()
	}
}

// UniquesKey is the HyperLogLog key of code's visitors on day, and
// VisitsKey its visit counter's key.
func (s *Service) UniquesKey(code string, day time.Time) string {
	return s.uniquesKey(code, day.Truncate(24*time.Hour).Unix())
}

func (s *Service) VisitsKey(code string) string { return s.space.Key(code, "visits") }
