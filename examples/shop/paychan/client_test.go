package paychan_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/examples/shop/paychan"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
)

// clock is a settable Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time)     { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }
func (c *clock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

// recorded is an answer of the channel, kept to be served again by replay.
type recorded struct {
	status int
	header http.Header
	body   []byte
}

func record(t *testing.T, url string) recorded {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return recorded{res.StatusCode, res.Header, body}
}

// replay returns a client of a server that answers every request with a.
func replay(t *testing.T, v order.RSAVerifier, a recorded) *paychan.Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for k, vs := range a.header {
			w.Header()[k] = vs
		}
		w.Header().Del("Content-Length") // the body may have been changed
		w.WriteHeader(a.status)
		w.Write(a.body)
	}))
	t.Cleanup(srv.Close)
	return paychan.NewClient(srv.URL, v, nil)
}

func TestQuery(t *testing.T) {
	_, notify := newShop(t, ok)
	ch := start(t, paychan.Config{NotifyURL: notify})
	cl := ch.Client()
	ctx := context.Background()
	paid, err := cl.Pay(ctx, 7, 990, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	if !paid.Success || paid.PayNo != 7 || paid.Amount != 990 || paid.Currency != "CNY" || paid.GatewayTxn == "" || paid.PaidAt.IsZero() {
		t.Fatalf("paid %+v", paid)
	}
	got, found, err := cl.Query(ctx, 7)
	if err != nil || !found || got != paid {
		t.Fatalf("query 7: %+v %v %v, paid %+v", got, found, err, paid)
	}
	if _, found, err := cl.Query(ctx, 8); err != nil || found {
		t.Fatalf("query 8: %v %v", found, err)
	}
	if _, _, err := cl.Query(ctx, 0); !errors.Is(err, paychan.ErrRejected) {
		t.Fatalf("query 0: %v", err)
	}

	// The client trusts nothing the channel's key did not sign.
	v := order.RSAVerifier{Key: ch.PublicKey()}
	answer := record(t, ch.URL()+"/query?pay_no=7")
	tampered := answer
	tampered.body = bytes.Replace(answer.body, []byte(`"amount":990`), []byte(`"amount":1`), 1)
	resigned := answer
	resigned.header = answer.header.Clone()
	resigned.header.Set(order.HeaderSignature, "c2lnbmVk")
	other, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*paychan.Client{
		"tampered body":        replay(t, v, tampered),
		"forged signature":     replay(t, v, resigned),
		"unsigned":             replay(t, v, recorded{200, http.Header{}, answer.body}),
		"another key":          paychan.NewClient(ch.URL(), order.RSAVerifier{Key: &other.PublicKey}, nil),
		"stale timestamp":      paychan.NewClient(ch.URL(), order.RSAVerifier{Key: ch.PublicKey(), Now: func() time.Time { return testenv.Now().Add(time.Hour) }}, nil),
		"answer about pay 7":   replay(t, v, answer),
		"not found, of pay 99": replay(t, v, record(t, ch.URL()+"/query?pay_no=99")),
	} {
		payNo := int64(7)
		if strings.HasPrefix(name, "answer") || strings.HasPrefix(name, "not found") {
			payNo = 8 // a genuine answer, replayed for another payment
		}
		if cb, found, err := c.Query(ctx, payNo); !errors.Is(err, order.ErrSignature) {
			t.Errorf("%s: %+v %v %v", name, cb, found, err)
		}
	}
}

func TestStatement(t *testing.T) {
	t0 := testenv.Now().UTC().Truncate(time.Second)
	clk := &clock{t: t0}
	sh, notify := newShop(t, ok)
	sh.verifier.Now = clk.Now
	ch := start(t, paychan.Config{NotifyURL: notify, Now: clk.Now})
	cl := ch.Client()
	ctx := context.Background()
	paid := map[string]order.Callback{}
	for payNo := range int64(10) {
		cb, err := cl.Pay(ctx, payNo+1, 100+payNo, "CNY")
		if err != nil {
			t.Fatal(err)
		}
		paid[cb.GatewayTxn] = cb
		clk.Add(time.Minute)
	}

	all, err := cl.Statement(ctx, t0, t0.Add(time.Hour))
	if err != nil || len(all) != 10 {
		t.Fatalf("statement: %d lines, %v", len(all), err)
	}
	var sum int64
	for _, l := range all {
		cb := paid[l.GatewayTxn]
		if l.PayNo != cb.PayNo || l.Amount != cb.Amount || !l.Time.Equal(cb.PaidAt) {
			t.Errorf("line %+v, collected %+v", l, cb)
		}
		sum += l.Amount
	}
	if st := ch.Stats(); sum != st.Collected {
		t.Errorf("statement sums to %d, collected %d", sum, st.Collected)
	}

	// [from, to): minutes 2, 3 and 4.
	window, err := cl.Statement(ctx, t0.Add(2*time.Minute), t0.Add(5*time.Minute))
	if err != nil || len(window) != 3 || window[0].PayNo != 3 || window[2].PayNo != 5 {
		t.Fatalf("window: %+v %v", window, err)
	}
	if _, err := cl.Statement(ctx, t0, t0); !errors.Is(err, paychan.ErrRejected) {
		t.Errorf("empty window: %v", err)
	}
	if a := record(t, ch.URL()+"/statement?from=yesterday&to=today"); a.status != http.StatusBadRequest {
		t.Errorf("bad times: %d", a.status)
	}

	// A genuine statement, served again for a narrower window, is refused;
	// so is a tampered one.
	v := order.RSAVerifier{Key: ch.PublicKey(), Now: clk.Now}
	full := record(t, ch.URL()+"/statement?from="+t0.Format(time.RFC3339)+"&to="+t0.Add(time.Hour).Format(time.RFC3339))
	if _, err := replay(t, v, full).Statement(ctx, t0, t0.Add(time.Minute)); err == nil {
		t.Error("a statement with lines outside the window was accepted")
	}
	full.body = bytes.Replace(full.body, []byte(",100,"), []byte(",1,"), 1)
	if _, err := replay(t, v, full).Statement(ctx, t0, t0.Add(time.Hour)); !errors.Is(err, order.ErrSignature) {
		t.Errorf("tampered statement: %v", err)
	}
}

func TestPayValidation(t *testing.T) {
	_, notify := newShop(t, ok)
	ch := start(t, paychan.Config{NotifyURL: notify})
	first, err := ch.Client().Pay(context.Background(), 1, 100, "CNY")
	if err != nil {
		t.Fatal(err)
	}
	post := func(body string) (int, string) {
		res, err := http.Post(ch.URL()+"/pay", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for body, want := range map[string]int{
		`{`:  400,
		`[]`: 400,
		`{"pay_no":"2","amount":5,"currency":"CNY"}`:                                                  400,
		`{"pay_no":2,"amount":5,"currency":"CNY","tip":1}`:                                            400,
		`{"pay_no":2,"amount":-5,"currency":"CNY"}`:                                                   400,
		`{"pay_no":2,"amount":0,"currency":"CNY"}`:                                                    400,
		`{"pay_no":0,"amount":5,"currency":"CNY"}`:                                                    400,
		`{"pay_no":2,"amount":5,"currency":"USD"}`:                                                    400,
		`{"pay_no":2,"amount":5}`:                                                                     400,
		`{"pay_no":2,"amount":5,"currency":"CNY"} {}`:                                                 400,
		`{"pay_no":2,"amount":5,"currency":"CNY","x":"` + strings.Repeat("a", paychan.MaxBody) + `"}`: 413,
		`{"pay_no":1,"amount":999,"currency":"CNY"}`:                                                  409,
	} {
		if got, answer := post(body); got != want {
			t.Errorf("%.60s: %d %s, want %d", body, got, answer, want)
		}
	}
	// A repeat is the same collection, collected once.
	status, answer := post(`{"pay_no":1,"amount":100,"currency":"CNY"}`)
	if cb, err := order.DecodeCallback([]byte(answer)); status != 200 || err != nil || cb != first {
		t.Errorf("repeat: %d %s, first %+v", status, answer, first)
	}
	if _, err := ch.Client().Pay(context.Background(), 3, -1, "CNY"); !errors.Is(err, paychan.ErrRejected) {
		t.Errorf("negative amount: %v", err)
	}
	for _, r := range []struct{ method, path string }{
		{"GET", "/pay"}, {"PUT", "/query?pay_no=1"}, {"POST", "/query?pay_no=1"}, {"DELETE", "/statement"},
	} {
		req, _ := http.NewRequest(r.method, ch.URL()+r.path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") == "" {
			t.Errorf("%s %s: %d, Allow %q", r.method, r.path, res.StatusCode, res.Header.Get("Allow"))
		}
	}
	for _, path := range []string{"/refund", "/query?pay_no=x", "/query?pay_no=-1"} {
		if a := record(t, ch.URL()+path); a.status/100 != 4 {
			t.Errorf("GET %s: %d", path, a.status)
		}
	}
	wait(t, ch)
	if st := ch.Stats(); st.Collections != 1 || st.Collected != 100 || st.Acknowledged != 1 {
		t.Errorf("bad requests changed the books: %+v", st)
	}
}

func TestConcurrentPaysCollectOnce(t *testing.T) {
	sh, notify := newShop(t, ok)
	ch := start(t, paychan.Config{NotifyURL: notify})
	cl := ch.Client()
	txns := make(chan string, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			cb, err := cl.Pay(context.Background(), 42, 500, "CNY")
			if err != nil {
				t.Error(err)
			}
			txns <- cb.GatewayTxn
		})
	}
	wg.Wait()
	close(txns)
	first := <-txns
	for txn := range txns {
		if txn != first {
			t.Errorf("transactions %s and %s for one payment", first, txn)
		}
	}
	wait(t, ch)
	deliveries, _, _, _, _ := sh.counts()
	if st := ch.Stats(); st.Collections != 1 || st.Collected != 500 || st.Sent != 1 || deliveries[first] != 1 {
		t.Errorf("stats %+v, deliveries %v", st, deliveries)
	}
}
