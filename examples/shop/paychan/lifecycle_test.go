package paychan_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/examples/shop/paychan"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
)

func TestCloseStopsEveryGoroutine(t *testing.T) {
	_, notify := newShop(t, func(order.Callback, int) int { return http.StatusInternalServerError })
	before := runtime.NumGoroutine()

	ch, err := paychan.New(paychan.Config{NotifyURL: notify, Key: testKey(), Retries: []time.Duration{time.Millisecond, time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := ch.Start("127.0.0.1:0"); err == nil {
		t.Error("started twice")
	}
	cl := ch.Client()
	payAll(t, cl, 50, 4)
	// Every callback fails twice, then waits an hour for its last retry.
	for deadline := testenv.Now().Add(10 * time.Second); ch.Stats().Sent < 100; time.Sleep(time.Millisecond) {
		if testenv.Now().After(deadline) {
			t.Fatalf("callbacks not sent: %+v", ch.Stats())
		}
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if st := ch.Stats(); st.Pending != 50 || st.Sent != 100 || st.Failed != 100 {
		t.Errorf("stats after close: %+v", st)
	}
	if err := ch.Start("127.0.0.1:0"); !errors.Is(err, paychan.ErrClosed) {
		t.Errorf("start after close: %v", err)
	}
	if err := ch.Wait(context.Background()); !errors.Is(err, paychan.ErrClosed) {
		t.Errorf("wait after close: %v", err)
	}
	cl.CloseIdleConnections()

	// Connections end asynchronously once closed: give them a moment.
	for deadline := testenv.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if testenv.Now().After(deadline) {
			var dump strings.Builder
			pprof.Lookup("goroutine").WriteTo(&dump, 1)
			t.Fatalf("%d goroutines before, %d after Close:\n%s", before, runtime.NumGoroutine(), dump.String())
		}
	}
}

func TestCloseUnstarted(t *testing.T) {
	ch, err := paychan.New(paychan.Config{NotifyURL: "http://127.0.0.1:1/", Key: testKey()})
	if err != nil {
		t.Fatal(err)
	}
	if ch.URL() != "" {
		t.Errorf("URL before Start: %q", ch.URL())
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Wait(context.Background()); err != nil {
		t.Errorf("wait with nothing pending: %v", err)
	}
}

func TestConfig(t *testing.T) {
	valid := paychan.Config{NotifyURL: "http://shop/pay/notify", Key: testKey()}
	for name, change := range map[string]func(*paychan.Config){
		"no NotifyURL":   func(c *paychan.Config) { c.NotifyURL = "" },
		"ftp NotifyURL":  func(c *paychan.Config) { c.NotifyURL = "ftp://shop/notify" },
		"currency":       func(c *paychan.Config) { c.Currency = "YUAN" },
		"scale":          func(c *paychan.Config) { c.Scale = -1 },
		"drop rate":      func(c *paychan.Config) { c.DropRate = 1.5 },
		"dup rate":       func(c *paychan.Config) { c.DupRate = -0.1 },
		"jitter":         func(c *paychan.Config) { c.Jitter = -time.Second },
		"senders":        func(c *paychan.Config) { c.Senders = -1 },
		"negative retry": func(c *paychan.Config) { c.Retries = []time.Duration{time.Second, -time.Second} },
	} {
		cfg := valid
		change(&cfg)
		if _, err := paychan.New(cfg); !errors.Is(err, paychan.ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	var total time.Duration
	for _, d := range paychan.WeChatPayRetries {
		total += d
	}
	if total != 24*time.Hour+4*time.Minute || len(paychan.WeChatPayRetries) != 15 {
		t.Errorf("WeChat Pay's schedule: %d retries over %v", len(paychan.WeChatPayRetries), total)
	}
}

func TestDefaultKey(t *testing.T) {
	ch, err := paychan.New(paychan.Config{NotifyURL: "http://shop/pay/notify"})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if bits := ch.PublicKey().N.BitLen(); bits != 2048 {
		t.Errorf("a %d-bit key", bits)
	}
}

// A connection that never carries a request — the spare an HTTP client
// dials while another connection frees up, which made Close fail under
// load — does not make Close fail: http.Server.Shutdown waits 5 s for it,
// then Close closes it and reports nothing cut off.
func TestCloseWithASpareConnection(t *testing.T) {
	ch, err := paychan.New(paychan.Config{NotifyURL: "http://127.0.0.1:1/", Key: testKey()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	spare, err := net.Dial("tcp", strings.TrimPrefix(ch.URL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer spare.Close()
	if err := ch.Close(); err != nil {
		t.Fatalf("close with a spare connection open: %v", err)
	}
	spare.SetReadDeadline(time.Now().Add(time.Second)) // wall clock: a socket deadline is on the real clock
	if _, err := spare.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading the spare connection after Close: %v, want EOF or a reset (closed by the server)", err)
	}
}
