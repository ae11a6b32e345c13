package shortlink_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

// lossyProxy forwards TCP to a Redis server and, when armed, loses the next
// reply: it closes the connection instead of passing it on — what a network
// failure after the command ran looks like. go-redis then sends the command
// again on a new connection.
type lossyProxy struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	lost   atomic.Int64
}

func newLossyProxy(t *testing.T, target string) *lossyProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
	return p
}

func (p *lossyProxy) pipe(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		io.Copy(server, client)
		server.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && p.armed.CompareAndSwap(true, false) {
			p.lost.Add(1)
			return
		}
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A visit whose reply is lost, and which go-redis therefore runs again,
// spends one visit, not two.
func TestVisitCountedOnceWhenReplyLost(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	direct, ok := r.Client.(*redis.Client)
	if !ok {
		t.Skipf("needs a single Redis server, got %T", r.Client)
	}
	proxy := newLossyProxy(t, direct.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String()})
	t.Cleanup(func() { c.Close() })
	s := newService(t, &testenv.Redis{Client: c, Namespace: r.Namespace, Kind: r.Kind}, shortlink.Config{})
	l, err := s.Shorten(ctx, "https://example.com/thrice", shortlink.Options{MaxVisits: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, l.Code); err != nil { // visit 1; the link is now cached here
		t.Fatal(err)
	}
	proxy.armed.Store(true) // the next Redis reply, visit 2's, is lost
	if _, err := s.Resolve(ctx, l.Code); err != nil {
		t.Fatalf("visit 2, reply lost and retried: %v", err)
	}
	if proxy.lost.Load() != 1 {
		t.Fatalf("%d replies lost, want 1", proxy.lost.Load())
	}
	if _, err := s.Resolve(ctx, l.Code); err != nil {
		t.Fatalf("visit 3: %v (the retried visit counted twice)", err)
	}
	if _, err := s.Resolve(ctx, l.Code); !errors.Is(err, shortlink.ErrMaxVisits) {
		t.Fatalf("visit 4: %v, want ErrMaxVisits", err)
	}
}
