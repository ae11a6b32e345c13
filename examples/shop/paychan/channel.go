package paychan

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/casebook-dev/casebook/order"
)

var (
	// ErrConfig is wrapped by every configuration error.
	ErrConfig = errors.New("paychan: bad config")
	// ErrClosed is returned by Start and Wait once Close was called.
	ErrClosed = errors.New("paychan: closed")
	// ErrRejected is wrapped by Client errors for a request the channel
	// answered with a 4xx status: bad input, nothing recorded.
	ErrRejected = errors.New("paychan: request rejected")
)

// WeChatPayRetries is WeChat Pay's callback schedule: the waits before each
// of the fifteen retries of an unacknowledged callback, 24 h 4 min in all.
var WeChatPayRetries = []time.Duration{
	15 * time.Second, 15 * time.Second, 30 * time.Second, 3 * time.Minute,
	10 * time.Minute, 20 * time.Minute, 30 * time.Minute, 30 * time.Minute,
	30 * time.Minute, time.Hour, 3 * time.Hour, 3 * time.Hour,
	3 * time.Hour, 6 * time.Hour, 6 * time.Hour,
}

// Config configures a Channel. Zero values take the defaults in brackets.
type Config struct {
	// NotifyURL is where callbacks are POSTed: the shop's notification
	// endpoint, such as http://shop/pay/notify. Required.
	NotifyURL string
	// Key signs callbacks and the answers to queries and statements
	// [a fresh 2048-bit key]. The shop verifies them with PublicKey.
	Key *rsa.PrivateKey
	// Currency is the one currency the merchant account collects, ISO 4217
	// [CNY]. A /pay in another currency is refused.
	Currency string
	// Retries are the waits before each retry of a callback the shop has
	// not acknowledged [WeChatPayRetries]; the first delivery is at once.
	// A non-nil empty slice means one delivery and no retry.
	Retries []time.Duration
	// Scale multiplies every wait of Retries [1]: 1e-4 runs WeChat Pay's
	// 24 h 4 min in 8.7 s, so that a test or a load run sees every retry.
	Scale float64
	// DropRate is the fraction of callbacks never sent, in [0, 1] [0].
	DropRate float64
	// DupRate is the fraction of callbacks delivered twice, in [0, 1] [0].
	DupRate float64
	// Jitter is the bound of a random extra wait before every delivery [0]:
	// a few times the shop's answer time reorders callbacks noticeably.
	Jitter time.Duration
	// Seed decides which callbacks are dropped, duplicated and delayed by
	// how much [0]; with the payment number, it alone decides.
	Seed uint64
	// Senders is how many callbacks may be in flight at once [16].
	Senders int
	// Client posts callbacks [a client with a 5 s timeout]. Its timeout is
	// how long the shop may take to answer before the delivery is retried.
	Client *http.Client
	// Now stamps collections and signatures [time.Now].
	Now func() time.Time
}

// withDefaults applies the defaults documented on Config.
func (c Config) withDefaults() (Config, error) {
	if c.Key == nil {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return c, fmt.Errorf("paychan: generate key: %w", err)
		}
		c.Key = k
	}
	if c.Currency == "" {
		c.Currency = "CNY"
	}
	if c.Retries == nil {
		c.Retries = WeChatPayRetries
	}
	c.Retries = slices.Clone(c.Retries) // the caller's slice may change later
	if c.Scale == 0 {
		c.Scale = 1
	}
	if c.Senders == 0 {
		c.Senders = 16
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, c.validate()
}

func (c Config) validate() error {
	u, err := url.Parse(c.NotifyURL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("%w: NotifyURL %q is not an http(s) URL", ErrConfig, c.NotifyURL)
	case len(c.Currency) != 3:
		return fmt.Errorf("%w: Currency %q is not an ISO 4217 code", ErrConfig, c.Currency)
	case c.Scale < 0:
		return fmt.Errorf("%w: Scale %v below 0", ErrConfig, c.Scale)
	case c.DropRate < 0 || c.DropRate > 1 || c.DupRate < 0 || c.DupRate > 1:
		return fmt.Errorf("%w: DropRate %v and DupRate %v must be in [0, 1]", ErrConfig, c.DropRate, c.DupRate)
	case c.Jitter < 0:
		return fmt.Errorf("%w: Jitter %v below 0", ErrConfig, c.Jitter)
	case c.Senders < 1:
		return fmt.Errorf("%w: Senders %d below 1", ErrConfig, c.Senders)
	}
	for _, d := range c.Retries {
		if d < 0 {
			return fmt.Errorf("%w: retry wait %v below 0", ErrConfig, d)
		}
	}
	return nil
}

// Stats is a balance sheet of a Channel. At every instant Collections =
// Dropped + Acknowledged + Refused + Abandoned + Pending.
type Stats struct {
	Collections  int64 // payments collected, one per payment number
	Collected    int64 // their amount, in the smallest unit of Config.Currency
	Dropped      int64 // collections whose callback was never sent
	Duplicated   int64 // collections whose callback was delivered twice
	Acknowledged int64 // collections whose callback the shop answered 2xx
	Refused      int64 // collections the shop answered 4xx (and never 2xx)
	Abandoned    int64 // collections whose retries ran out unanswered
	Pending      int64 // collections whose callback is still being delivered
	Sent         int64 // callback requests made, retries and duplicates included
	Failed       int64 // of those, answered 5xx or not at all (retried while the schedule lasts)
}

// Refusal is a callback the shop refused with a 4xx answer.
type Refusal struct {
	PayNo      int64
	GatewayTxn string
	Status     int    // the HTTP status
	Answer     string // the start of the answer's body
}

// collection is one payment the channel collected, and how its callback
// fares. Its fields after cb are guarded by Channel.mu.
type collection struct {
	cb      order.Callback
	body    []byte // cb as JSON: what is signed and sent, byte for byte
	chains  int    // deliveries still running (2 for a duplicated callback)
	acked   bool
	refusal *Refusal
}

// Channel is a simulated payment channel. See the package doc.
type Channel struct {
	cfg    Config
	txnPre string // makes gateway transaction ids unique across channels

	mu      sync.Mutex
	byPayNo map[int64]*collection
	paid    []*collection // in the order collected
	stats   Stats
	queue   deliveries
	idle    chan struct{} // closed while no callback is pending
	started bool
	closed  bool

	wake   chan struct{} // a delivery was queued
	work   chan *delivery
	done   chan struct{}      // closed by Close
	stop   context.CancelFunc // aborts the callbacks in flight (set by Start)
	wg     sync.WaitGroup
	srv    *http.Server
	ln     net.Listener
	conns  connStates
	closer sync.Once
}

// connStates follows the server's connections (http.Server.ConnState), so
// that Close can tell a request cut off from a connection that never
// carried one.
type connStates struct {
	mu sync.Mutex
	m  map[net.Conn]http.ConnState
}

func (cs *connStates) set(c net.Conn, st http.ConnState) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m == nil {
		cs.m = map[net.Conn]http.ConnState{}
	}
	if st == http.StateClosed || st == http.StateHijacked {
		delete(cs.m, c)
	} else {
		cs.m[c] = st
	}
}

// active counts the connections answering a request.
func (cs *connStates) active() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	n := 0
	for _, st := range cs.m {
		if st == http.StateActive {
			n++
		}
	}
	return n
}

// New returns a Channel for cfg. It serves and sends nothing until Start.
func New(cfg Config) (*Channel, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pre := make([]byte, 4)
	rand.Read(pre)
	idle := make(chan struct{})
	close(idle)
	return &Channel{
		cfg: cfg, txnPre: "T" + hex.EncodeToString(pre),
		byPayNo: map[int64]*collection{}, idle: idle,
		wake: make(chan struct{}, 1), work: make(chan *delivery), done: make(chan struct{}),
	}, nil
}

// PublicKey is the key the shop verifies the channel's signatures with
// (order.RSAVerifier{Key: ch.PublicKey()}).
func (c *Channel) PublicKey() *rsa.PublicKey { return &c.cfg.Key.PublicKey }

// Start listens on addr (such as "127.0.0.1:0"), serves the channel's API
// and starts sending callbacks. It may be called once.
func (c *Channel) Start(addr string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ErrClosed
	case c.started:
		return fmt.Errorf("paychan: already started on %s", c.ln.Addr())
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("paychan: listen: %w", err)
	}
	c.ln, c.started = ln, true
	c.srv = &http.Server{
		Handler:           c.handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
		ConnState:         c.conns.set,
	}
	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	c.wg.Add(2 + c.cfg.Senders)
	go func() { defer c.wg.Done(); c.srv.Serve(ln) }()
	go func() { defer c.wg.Done(); c.schedule() }()
	for range c.cfg.Senders {
		go func() { defer c.wg.Done(); c.send(ctx) }()
	}
	return nil
}

// URL is the base URL the channel serves on ("" before Start).
func (c *Channel) URL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ln == nil {
		return ""
	}
	return "http://" + c.ln.Addr().String()
}

// Client returns a Client of this channel that trusts its key.
func (c *Channel) Client() *Client {
	return NewClient(c.URL(), order.RSAVerifier{Key: c.PublicKey(), Now: c.cfg.Now}, nil)
}

// Close stops serving (finishing the requests being answered, for up to a
// few seconds), stops every callback — those in flight are abandoned
// mid-request and counted Pending — and waits for every goroutine of the
// channel to end. It is safe to call twice. It reports an error only when a
// request was still being answered after the grace: a connection that never
// carried a request (a client's spare, which http.Server.Shutdown waits
// 5 s for) is closed without one.
func (c *Channel) Close() error {
	var err error
	c.closer.Do(func() {
		c.mu.Lock()
		c.closed = true
		srv, stop := c.srv, c.stop
		c.mu.Unlock()
		if srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = srv.Shutdown(ctx)
			cancel()
			if err != nil {
				if c.conns.active() == 0 && errors.Is(err, context.DeadlineExceeded) {
					err = nil // only connections that never carried a request were left
				} else {
					err = fmt.Errorf("paychan: close: %w", err)
				}
				srv.Close()
			}
			stop()
		}
		close(c.done)
		c.wg.Wait()
		c.cfg.Client.CloseIdleConnections()
	})
	return err
}

// Stats returns the balance sheet as of now.
func (c *Channel) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Refusals lists the callbacks the shop refused, in the order collected.
func (c *Channel) Refusals() []Refusal {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Refusal
	for _, col := range c.paid {
		if col.refusal != nil && !col.acked && col.chains == 0 {
			out = append(out, *col.refusal)
		}
	}
	return out
}

// Wait blocks until no callback is pending: every one was acknowledged,
// refused, abandoned or dropped. It returns ctx's error, or ErrClosed when
// the channel closes with callbacks pending.
func (c *Channel) Wait(ctx context.Context) error {
	c.mu.Lock()
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		if c.Stats().Pending == 0 {
			return nil
		}
		return ErrClosed
	}
}

// collect records a collection for payNo, or returns the one recorded
// before; conflict is true when that one has another amount or currency.
func (c *Channel) collect(payNo, amount int64, currency string) (cb order.Callback, conflict bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if col, ok := c.byPayNo[payNo]; ok {
		return col.cb, col.cb.Amount != amount || col.cb.Currency != currency, nil
	}
	if c.closed {
		return cb, false, ErrClosed
	}
	cb = order.Callback{
		PayNo: payNo, Amount: amount, Currency: currency, Success: true,
		GatewayTxn: fmt.Sprintf("%s-%d", c.txnPre, c.stats.Collections+1),
		PaidAt:     c.cfg.Now().UTC().Truncate(time.Millisecond),
	}
	col := &collection{cb: cb, body: mustJSON(cb)}
	c.byPayNo[payNo] = col
	c.paid = append(c.paid, col)
	c.stats.Collections++
	c.stats.Collected += amount

	// The faults follow from the seed and payNo alone, not the arrival order.
	rng := mrand.New(mrand.NewPCG(c.cfg.Seed, uint64(payNo)))
	drop, dup := rng.Float64() < c.cfg.DropRate, rng.Float64() < c.cfg.DupRate
	switch {
	case drop:
		c.stats.Dropped++
		return cb, false, nil
	case dup:
		c.stats.Duplicated++
		col.chains = 2
	default:
		col.chains = 1
	}
	c.stats.Pending++
	if c.stats.Pending == 1 {
		c.idle = make(chan struct{})
	}
	for range col.chains {
		c.enqueue(&delivery{col: col, rng: mrand.New(mrand.NewPCG(rng.Uint64(), rng.Uint64()))})
	}
	return cb, false, nil
}

// settle records the end of one delivery of col; the collection is settled
// when its last delivery ends, as acknowledged if any delivery was. c.mu
// must be held.
func (c *Channel) settle(col *collection, status int, answer string) {
	switch {
	case status >= 200 && status < 300:
		col.acked = true
	case status >= 400 && status < 500 && col.refusal == nil:
		col.refusal = &Refusal{PayNo: col.cb.PayNo, GatewayTxn: col.cb.GatewayTxn, Status: status, Answer: answer}
	}
	if col.chains--; col.chains > 0 {
		return
	}
	switch {
	case col.acked:
		c.stats.Acknowledged++
	case col.refusal != nil:
		c.stats.Refused++
	default:
		c.stats.Abandoned++
	}
	if c.stats.Pending--; c.stats.Pending == 0 {
		close(c.idle)
	}
}
