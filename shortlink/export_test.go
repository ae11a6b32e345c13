package shortlink

import "context"

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
