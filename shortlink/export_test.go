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
