package seckill

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// LoadScripts puts the package's scripts in c's script cache, so that a test
// counting commands sees no EVALSHA answered NOSCRIPT and sent again as EVAL.
func LoadScripts(ctx context.Context, c redis.Scripter) error {
	for _, sc := range []*redis.Script{buyScript, takeScript, unquotaScript, closeScript, rebuildScript} {
		if err := sc.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}

// Home is the bucket holding user's quota.
func (sl *Sale) Home(user string) int { return sl.home(user) }

// Key is the key of part of bucket b.
func (sl *Sale) Key(b int, part string) string { return sl.key(b, part) }
