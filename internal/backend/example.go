package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// OpenClusterOrStandalone is for examples: the Redis Cluster at addrs, else a
// spawned six-node cluster, else — on a machine without the redis-server
// binary — one embedded Redis, saying so on w.
func OpenClusterOrStandalone(ctx context.Context, addrs []string, w io.Writer) (*Redis, error) {
	r, err := OpenRedisCluster(ctx, addrs)
	if errors.Is(err, ErrNoRedisServer) {
		fmt.Fprintln(w, "note: no redis-server binary, so no local Redis Cluster; using one embedded Redis instead")
		return OpenRedis(ctx, "")
	}
	return r, err
}
