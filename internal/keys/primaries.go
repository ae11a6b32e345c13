package keys

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// EachPrimary calls fn with a client of every node that owns keys: each
// master of a cluster (concurrently, as go-redis' ForEachMaster does), or the
// one server behind a plain client. A scan, a sample or a sweep of keys by
// pattern must visit every primary, since a cluster client's SCAN reaches
// only one.
func EachPrimary(ctx context.Context, c redis.UniversalClient, fn func(ctx context.Context, node *redis.Client) error) error {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	default:
		return fmt.Errorf("cannot visit the primaries of a %T", c)
	}
}
