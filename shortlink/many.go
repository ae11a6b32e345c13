package shortlink

import (
	"context"
	"fmt"
)

// MaxBatch is the most requests one ShortenMany takes.
const MaxBatch = 100

// Request is one link for ShortenMany: Shorten's arguments.
type Request struct {
	URL     string
	Options Options
}

// Result is the outcome of one Request: the link made, or why not.
type Result struct {
	Link *Link
	Err  error
}

// ShortenMany shortens each request as Shorten would and returns one
// Result per request, in the same order. It is not all or nothing: each
// item is made or refused on its own (a bad item changes nothing and the
// others are still made; an item with Options.ClientIP spends one unit of
// that IP's create limit, so items past the limit fail with a
// *RateLimitError), and when ShortenMany returns every successful item is
// stored. More than MaxBatch requests is ErrInvalidOptions and makes none,
// as does an empty batch; after Close it is ErrClosed. Cost: the sum of the
// items' Shortens — per owned item an index write, an INSERT and a Redis
// DEL — made one after the other.
func (s *Service) ShortenMany(ctx context.Context, reqs []Request) ([]Result, error) {
	ctx, call := s.obs.shortenMany.Start(ctx)
	res, err := s.shortenMany(ctx, reqs)
	return res, call.End(err)
}

func (s *Service) shortenMany(ctx context.Context, reqs []Request) ([]Result, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if err := checkBatch(len(reqs)); err != nil {
		return nil, err
	}
	res := make([]Result, len(reqs))
	for i, r := range reqs {
		res[i].Link, res[i].Err = s.shorten(ctx, r.URL, r.Options)
	}
	return res, nil
}

func checkBatch(n int) error {
	if n < 1 || n > MaxBatch {
		return fmt.Errorf("%w: a batch of %d links (1..%d)", ErrInvalidOptions, n, MaxBatch)
	}
	return nil
}
