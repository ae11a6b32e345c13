package seckill_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
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

// replyDropper is a TCP proxy between go-redis and a Redis server that loses
// replies: once armed, it forwards the nth command containing a marker to the
// server and then closes the client's connection before the reply reaches
// it, as a network fault after the server acted would. go-redis takes the
// EOF for a retryable error and sends the command again on a new connection.
type replyDropper struct {
	t       *testing.T
	ln      net.Listener
	target  string
	mu      sync.Mutex
	marker  []byte
	nth     int
	dropped atomic.Int64
}

func newReplyDropper(t *testing.T, target string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{t: t, ln: ln, target: target}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.pipe(c) })
		}
	})
	return p
}

func (p *replyDropper) Addr() string { return p.ln.Addr().String() }

// arm makes the proxy lose the reply to the nth command from now on that
// contains marker.
func (p *replyDropper) arm(marker string, nth int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker, p.nth = []byte(marker), nth
}

// matches counts cmd against the armed marker and reports whether its reply
// is the one to lose.
func (p *replyDropper) matches(cmd []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.marker == nil || !bytes.Contains(cmd, p.marker) {
		return false
	}
	if p.nth--; p.nth > 0 {
		return false
	}
	p.marker = nil
	return true
}

func (p *replyDropper) pipe(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	var lose atomic.Bool
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if p.matches(buf[:n]) {
					lose.Store(true) // before the server can answer
				}
				if _, err := server.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				server.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && lose.Load() {
			p.dropped.Add(1)
			return // the server acted; its reply is lost with the connection
		}
		if n > 0 {
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
