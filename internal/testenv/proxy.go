package testenv

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Proxy is a TCP proxy between a client and a server that can lose replies:
// the request reaches the server and is executed, and the connection is cut
// before the reply gets back — what a network fault or a timeout looks like
// to a client, which then retries on a new connection. Tests use it to prove
// that a retried call is applied once.
type Proxy struct {
	Addr   string // where clients connect
	target string
	ln     net.Listener
	drop   atomic.Int64
	cuts   atomic.Int64
	mu     sync.Mutex
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

// NewProxy proxies to target until the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// DropReplies makes the next n replies from the server vanish: each one
// cuts its connection instead of reaching the client.
func (p *Proxy) DropReplies(n int) { p.drop.Store(int64(n)) }

// Cuts returns how many replies were dropped so far.
func (p *Proxy) Cuts() int64 { return p.cuts.Load() }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c, s)
		p.wg.Go(func() { io.Copy(s, c); s.Close() })
		p.wg.Go(func() { p.replies(c, s); c.Close() })
	}
}

// replies copies the server's bytes to the client, cutting both connections
// instead when a drop is due.
func (p *Proxy) replies(c, s net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			if p.drop.Add(-1) >= 0 {
				p.cuts.Add(1)
				c.Close()
				s.Close()
				return
			}
			p.drop.Add(1)
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = true
	}
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// NewLossyRedis returns the test's standalone Redis reached through a Proxy,
// with go-redis' default retries: a dropped reply makes the client send the
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
