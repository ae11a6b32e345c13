package idgen

import (
	"context"
	_ "embed"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed checkpoint_save.lua
var checkpointSaveLua string

var checkpointSave = redis.NewScript(checkpointSaveLua)

// RedisCheckpoint keeps a snowflake node's reservation in one Redis key. Use
// a key per node id. A Redis that loses the key (failover before
// replication, no persistence) loses the protection for that restart only:
// run it with AOF, or use a Checkpoint on your system of record.
type RedisCheckpoint struct {
	c   checkpointClient
	key string
}

type checkpointClient interface {
	redis.Scripter
	Get(ctx context.Context, key string) *redis.StringCmd
}

// NewRedisCheckpoint returns a Checkpoint stored under key.
func NewRedisCheckpoint(c redis.UniversalClient, key string) *RedisCheckpoint {
	return &RedisCheckpoint{c: c, key: key}
}

// Load implements Checkpoint.
func (r *RedisCheckpoint) Load(ctx context.Context) (time.Time, error) {
	ms, err := r.c.Get(ctx, r.key).Int64()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(ms), nil
}

// Save implements Checkpoint; it never lowers the stored time.
func (r *RedisCheckpoint) Save(ctx context.Context, t time.Time) error {
	return checkpointSave.Run(ctx, r.c, []string{r.key}, t.UnixMilli()).Err()
}
