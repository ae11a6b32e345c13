package shortlink

// WaitLocal waits until the local cache has applied every write made so
// far (ristretto applies them in the background), so that a test can tell
// which layer answers next.
func (s *Service) WaitLocal() { s.local.Wait() }
