package testenv

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Proxy is a TCP proxy between a client and a server that can lose
// replies: a request reaches the server and is executed, and the connection
// is cut before the reply gets back — what a network fault or a timeout
// looks like to a client, which then sends the command again on a new
// connection. Tests use it to prove that a retried call is applied once.
type Proxy struct {
	Addr   string // where clients connect
	target string
	ln     net.Listener
	wg     sync.WaitGroup
	cuts   atomic.Int64

	mu     sync.Mutex
	drops  int    // DropReplies: replies still to lose, to any request
	marker []byte // DropReplyTo: the request to lose the reply of contains it
	nth    int    // DropReplyTo: matching requests until that one
}

// NewProxy proxies to target until the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.pipe(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

// DropReplies makes the replies to the next n requests lost, whatever they
// are — a retried command included, so n larger than the client's retries
// makes the call fail (0 disarms).
func (p *Proxy) DropReplies(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drops, p.marker = n, nil
}

// DropReplyTo makes the reply to the nth request from now that contains
// marker (a key, an argument) lost, and only that one.
func (p *Proxy) DropReplyTo(marker string, nth int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drops, p.marker, p.nth = 0, []byte(marker), nth
}

// Cuts returns how many replies were lost so far.
func (p *Proxy) Cuts() int64 { return p.cuts.Load() }

// matches counts a request against the armed rule and reports whether its
// reply is the one to lose.
func (p *Proxy) matches(req []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drops > 0 {
		p.drops--
		return true
	}
	if p.marker == nil || !bytes.Contains(req, p.marker) {
		return false
	}
	if p.nth--; p.nth > 0 {
		return false
	}
	p.marker = nil
	return true
}

func (p *Proxy) pipe(client net.Conn) {
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
			p.cuts.Add(1)
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

// NewLossyRedis returns the test's standalone Redis reached through a Proxy,
// with go-redis' default retries: a lost reply makes the client send the
// same command again on a new connection.
func NewLossyRedis(t testing.TB) (*Redis, *Proxy) {
	t.Helper()
	r := NewRedis(t)
	addr := r.Client.(*redis.Client).Options().Addr
	p := NewProxy(t, addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr})
	t.Cleanup(func() { c.Close() })
	return &Redis{Client: c, Namespace: r.Namespace, Kind: r.Kind}, p
}
