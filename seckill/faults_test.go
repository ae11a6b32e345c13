package seckill_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/testenv"
)

// errInjected is what failNext makes a command return.
var errInjected = errors.New("injected fault")

// failNext is a go-redis hook that fails the next n commands named name
// (lower case, as Cmder.Name reports it) without sending them.
type failNext struct {
	name string
	n    atomic.Int64
}

func (f *failNext) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *failNext) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == f.name && f.n.Add(-1) >= 0 {
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}
}

func (f *failNext) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ownClient returns the test's standalone Redis through a client of its own
// (to hook), connecting to addr instead when addr is set (a proxy). It shares
// the namespace, so the test's cleanup still deletes its keys.
func ownClient(t *testing.T, r *testenv.Redis, addr string) *testenv.Redis {
	t.Helper()
	if addr == "" {
		addr = serverAddr(t, r)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return &testenv.Redis{Client: c, Namespace: r.Namespace, Kind: r.Kind}
}

func serverAddr(t *testing.T, r *testenv.Redis) string {
	t.Helper()
	std, ok := r.Client.(*redis.Client)
	if !ok {
		t.Fatalf("want a standalone client, got %T", r.Client)
	}
	return std.Options().Addr
}
