// Package faultproxy is casebook's fault layer: a TCP proxy between clients
// and one server that can delay, reset, black-hole and cut connections, and
// lose a reply after the server executed the request. The tests use it
// through internal/testenv; the harness' soak mode injects its faults at
// random.
package faultproxy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is a TCP proxy between clients and one server (a Redis, a MySQL/MariaDB server), made
// of an in-process toxiproxy facing the clients and, behind it, a stage
// that can lose a reply after the server executed its request.
//
// Faults armed with Latency, Reset, BlackHole and CutAfter hold until Heal;
// a lost reply (DropReplies, DropReplyTo) is a one-shot, counted by Cuts.
// Its methods are safe for concurrent use; Close stops the proxy and its
// connections.
type Proxy struct {
	Addr string // where clients connect
	toxi *toxiproxy.Proxy

	target string
	ln     net.Listener
	wg     sync.WaitGroup
	cuts   atomic.Int64
	// resetting is set while Reset is armed; resets counts the connections
	// that ended then from the client's side: reset by the fault.
	resetting atomic.Bool
	resets    atomic.Int64

	armMu  sync.Mutex // arming and healing toxics
	mu     sync.Mutex
	drops  int    // DropReplies: replies still to lose, to any request
	marker []byte // DropReplyTo: the request to lose the reply of contains it
	nth    int    // DropReplyTo: matching requests until that one
}

// Start proxies to target until Close.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{target: target, ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.pipe(c) })
		}
	})
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p.toxi = toxiproxy.NewProxy(server, "cbt-"+target, "127.0.0.1:0", ln.Addr().String())
	if err := p.toxi.Start(); err != nil {
		ln.Close()
		p.wg.Wait()
		return nil, fmt.Errorf("faultproxy: toxiproxy: %w", err)
	}
	p.Addr = p.toxi.Listen
	return p, nil
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.toxi.Stop()
	p.ln.Close()
	p.wg.Wait()
}

// Latency delays every reply by d ± jitter.
func (p *Proxy) Latency(d, jitter time.Duration) {
	p.toxic("latency", "downstream", fmt.Sprintf(`{"latency": %d, "jitter": %d}`, d.Milliseconds(), jitter.Milliseconds()))
}

// Reset resets (TCP RST) every connection as soon as its client sends
// anything, new connections included: in-flight requests, transactions and
// pipelines die half-way, and nothing gets through until Heal.
func (p *Proxy) Reset() {
	p.resetting.Store(true)
	p.toxic("reset_peer", "upstream", `{"timeout": 0}`)
}

// Resets returns how many connections a Reset fault ended so far: a
// flapping reset can miss every request, and a test that wants its fault
// felt asks this.
func (p *Proxy) Resets() int64 { return p.resets.Load() }

// BlackHole swallows every byte both ways while keeping the connections
// open, as a partitioned or frozen server does: calls hang until their
// context ends. Heal closes the connections that were black-holed.
func (p *Proxy) BlackHole() {
	p.toxic("timeout", "upstream", `{"timeout": 0}`)
	p.toxic("timeout", "downstream", `{"timeout": 0}`)
}

// CutAfter closes each connection once its client has sent n bytes on it,
// part of a request included.
func (p *Proxy) CutAfter(n int64) { p.toxic("limit_data", "upstream", fmt.Sprintf(`{"bytes": %d}`, n)) }

// Heal removes every armed fault: toxics and reply losses not yet spent.
func (p *Proxy) Heal() {
	p.resetting.Store(false)
	p.armMu.Lock()
	p.toxi.Toxics.ResetToxics(context.Background())
	p.armMu.Unlock()
	p.DropReplies(0)
}

// toxic arms one toxic, replacing one of the same kind and stream. The
// specs are built here, so toxiproxy refusing one is a bug: it panics.
func (p *Proxy) toxic(kind, stream, attributes string) {
	p.armMu.Lock()
	defer p.armMu.Unlock()
	name := kind + "_" + stream
	if p.toxi.Toxics.GetToxic(name) != nil {
		// Gone already when a concurrent Heal reset it: nothing to remove.
		_ = p.toxi.Toxics.RemoveToxic(context.Background(), name)
	}
	spec := fmt.Sprintf(`{"name": %q, "type": %q, "stream": %q, "attributes": %s}`, name, kind, stream, attributes)
	if _, err := p.toxi.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		panic(fmt.Sprintf("faultproxy: %s: %v", name, err))
	}
}

// DropReplies makes the replies to the next n requests lost, whatever they
// are — a retried command included, so n larger than the client's retries
// makes the call fail (0 disarms). The server executes each request; the
// connection is cut before its reply gets back, what a network fault or a
// timeout looks like to a client, which then sends the command again on a
// new connection.
func (p *Proxy) DropReplies(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drops, p.marker = n, nil
}

// DropReplyTo makes the reply to the nth request from now that contains
// marker (a key, an argument; "COMMIT" for SQL) lost, and only that one.
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

// pipe is the reply-losing stage behind toxiproxy, one per connection.
func (p *Proxy) pipe(client net.Conn) {
	var ours atomic.Bool // this side closes the client connection
	defer func() {
		ours.Store(true)
		client.Close()
	}()
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
				if !ours.Load() && p.resetting.Load() {
					p.resets.Add(1)
				}
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

// Flap arms a fault with arm for on, heals the proxy for off, and again,
// until stop closes (the fault is then healed): a flaky link rather than a
// dead one, so that a block's retries meet the fault and get through.
func (p *Proxy) Flap(stop <-chan struct{}, on, off time.Duration, arm func()) {
	defer p.Heal()
	for {
		arm()
		if !sleepUntil(stop, on) {
			return
		}
		p.Heal()
		if !sleepUntil(stop, off) {
			return
		}
	}
}

// sleepUntil waits d or until stop closes, and reports whether it was d.
func sleepUntil(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}
