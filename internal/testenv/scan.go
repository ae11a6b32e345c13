package testenv

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
)

// ScanKeys returns the distinct keys matching pattern on c (one server:
// on a cluster, call it per primary), sorted. SCAN may return a key more
// than once — while Redis rehashes a keyspace, which other tests sharing the
// server grow — so a test that counts, copies or sums keys reads them here.
func ScanKeys(ctx context.Context, c redis.Cmdable, pattern string) ([]string, error) {
	seen := map[string]bool{}
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		seen[iter.Val()] = true
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	return slices.Sorted(func(yield func(string) bool) {
		for k := range seen {
			if !yield(k) {
				return
			}
		}
	}), nil
}
