package shortlink_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

// counting counts the commands a client sends to the rate limiter's keys
// (redis_rate prefixes them "rate:"), pipelined ones included.
type counting struct{ n atomic.Int64 }

func (c *counting) count(cmd redis.Cmder) {
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.HasPrefix(s, "rate:") {
			c.n.Add(1)
			return
		}
	}
}

func (c *counting) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counting) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.count(cmd); return next(ctx, cmd) }
}
func (c *counting) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// With the local miss filter (the default) a client that has not missed costs no rate-limiter
// call; without it, each lookup reads its budget first.
func TestLocalMissFilterSkipsRedis(t *testing.T) {
	ctx := context.Background()
	base := testenv.NewRedis(t)
	opts := base.Client.(*redis.Client).Options()
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprintf("local-miss-filter=%v", local), func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: opts.Addr, Password: opts.Password, DB: opts.DB})
			defer c.Close()
			cnt := &counting{}
			c.AddHook(cnt)
			s := newService(t, &testenv.Redis{Client: c, Namespace: base.Namespace + fmt.Sprint(local), Kind: base.Kind},
				shortlink.Config{SharedMissCheck: !local, MissLimit: redis_rate.PerMinute(3)})
			l, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 { // warm the local cache
				if _, err := s.ResolveWith(ctx, l.Code, shortlink.ResolveOptions{ClientIP: "10.1.0.1"}); err != nil {
					t.Fatal(err)
				}
			}
			before := cnt.n.Load()
			for range 100 {
				if _, err := s.ResolveWith(ctx, l.Code, shortlink.ResolveOptions{ClientIP: "10.1.0.1"}); err != nil {
					t.Fatal(err)
				}
			}
			got := cnt.n.Load() - before
			if local && got != 0 || !local && got < 100 {
				t.Fatalf("100 resolves sent %d rate-limiter commands", got)
			}
			// A miss makes the client suspect: its budget is read again.
			if _, err := s.ResolveWith(ctx, "nosuchcode", shortlink.ResolveOptions{ClientIP: "10.1.0.1"}); !errors.Is(err, shortlink.ErrNotFound) {
				t.Fatal(err)
			}
			before = cnt.n.Load()
			if _, err := s.ResolveWith(ctx, l.Code, shortlink.ResolveOptions{ClientIP: "::ffff:10.1.0.1"}); err != nil {
				t.Fatal(err)
			}
			if got := cnt.n.Load() - before; got == 0 {
				t.Fatal("a client that missed did not have its budget read (any spelling of its address)")
			}
		})
	}
}

// What the local miss filter costs across processes: a client that spent its
// budget through one Service gets one lookup through another before that
// one refuses it too; without the filter it gets none.
func TestLocalMissFilterAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprintf("local-miss-filter=%v", local), func(t *testing.T) {
			cfg := shortlink.Config{SharedMissCheck: !local, MissLimit: redis_rate.PerMinute(3), TablesPerDB: 16}
			a, b := newServiceOn(t, r, db, cfg), newServiceOn(t, r, db, cfg)
			l, err := a.Shorten(ctx, "https://example.com/", shortlink.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ip := fmt.Sprintf("10.2.0.%d", map[bool]int{false: 1, true: 2}[local])
			for i := range 3 {
				if _, err := a.ResolveWith(ctx, fmt.Sprintf("walk%d", i), shortlink.ResolveOptions{ClientIP: ip}); !errors.Is(err, shortlink.ErrNotFound) {
					t.Fatalf("miss %d on a: %v", i+1, err)
				}
			}
			_, err = b.ResolveWith(ctx, l.Code, shortlink.ResolveOptions{ClientIP: ip})
			if local && err != nil || !local && !errors.Is(err, shortlink.ErrRateLimited) {
				t.Fatalf("first lookup on b after the budget was spent on a: %v", err)
			}
			if local { // its one lookup on b misses: refused, and b now checks it
				if _, err := b.ResolveWith(ctx, "walk9", shortlink.ResolveOptions{ClientIP: ip}); !errors.Is(err, shortlink.ErrRateLimited) {
					t.Fatalf("a miss on b with no budget: %v", err)
				}
			}
			if _, err := b.ResolveWith(ctx, l.Code, shortlink.ResolveOptions{ClientIP: ip}); !errors.Is(err, shortlink.ErrRateLimited) {
				t.Fatalf("b, once it saw the client miss: %v, want refused", err)
			}
		})
	}
}

// LocalMissClients is validated; a tiny filter still enforces the limit
// (full, it checks everyone in Redis).
func TestLocalMissFilterFull(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	if _, err := shortlink.NewService(r.Client, nil, shortlink.Config{BaseURL: "https://sho.rt", LocalMissClients: -1}); !errors.Is(err, shortlink.ErrConfig) {
		t.Fatalf("LocalMissClients -1: %v, want ErrConfig", err)
	}
	db := testenv.NewSQL(t)
	cfg := shortlink.Config{LocalMissClients: 1, MissLimit: redis_rate.PerMinute(2), TablesPerDB: 16}
	a, b := newServiceOn(t, r, db, cfg), newServiceOn(t, r, db, cfg)
	l, err := a.Shorten(ctx, "https://example.com/", shortlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Fill b's filter (one client per shard) with misses from 500 clients.
	for i := range 500 {
		ip := net.IPv4(10, 3, byte(i/250), byte(i%250)).String()
		if _, err := b.ResolveWith(ctx, "nosuchcode", shortlink.ResolveOptions{ClientIP: ip}); !errors.Is(err, shortlink.ErrNotFound) {
			t.Fatalf("miss from %s: %v", ip, err)
		}
	}
	// A client that spent its budget on a is refused on b at once: b's
	// filter could not track everyone, so it checks everyone.
	for i := range 2 {
		if _, err := a.ResolveWith(ctx, fmt.Sprintf("walk%d", i), shortlink.ResolveOptions{ClientIP: "10.4.0.1"}); !errors.Is(err, shortlink.ErrNotFound) {
			t.Fatalf("miss %d on a: %v", i+1, err)
		}
	}
	if _, err := b.ResolveWith(ctx, l.Code, shortlink.ResolveOptions{ClientIP: "10.4.0.1"}); !errors.Is(err, shortlink.ErrRateLimited) {
		t.Fatalf("with b's filter full: %v, want refused", err)
	}
}
