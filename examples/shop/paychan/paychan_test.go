package paychan_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/examples/shop/paychan"
	"github.com/casebook-dev/casebook/order"
)

// testKey is one key for every test: generating one per test would cost
// more than the tests.
var testKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// shop stands in for the shop's notification endpoint: it verifies every
// callback with order.RSAVerifier, answers what answer says for the nth
// delivery of a transaction, and applies each transaction once.
type shop struct {
	verifier order.RSAVerifier
	answer   func(cb order.Callback, nth int) int

	mu         sync.Mutex
	deliveries map[string]int            // requests per gateway txn
	applied    map[string]order.Callback // acknowledged, by gateway txn
	applies    map[int64]int             // applications per pay_no
	arrivals   []int64                   // pay_no of every verified request, in order
	rejected   int                       // requests refused for a bad signature or body
}

func newShop(t *testing.T, answer func(cb order.Callback, nth int) int) (*shop, string) {
	s := &shop{
		verifier: order.RSAVerifier{Key: &testKey().PublicKey}, answer: answer,
		deliveries: map[string]int{}, applied: map[string]order.Callback{}, applies: map[int64]int{},
	}
	srv := httptest.NewServer(http.HandlerFunc(s.notify))
	t.Cleanup(srv.Close)
	return s, srv.URL + "/pay/notify"
}

func ok(order.Callback, int) int { return http.StatusOK }

func (s *shop) notify(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, order.MaxCallbackBody))
	if err == nil {
		err = s.verifier.Verify(r.Header, body)
	}
	cb, derr := order.DecodeCallback(body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || derr != nil {
		s.rejected++
		http.Error(w, "bad callback", http.StatusUnauthorized)
		return
	}
	s.deliveries[cb.GatewayTxn]++
	s.arrivals = append(s.arrivals, cb.PayNo)
	status := s.answer(cb, s.deliveries[cb.GatewayTxn])
	if status/100 == 2 {
		if _, seen := s.applied[cb.GatewayTxn]; !seen {
			s.applied[cb.GatewayTxn] = cb
			s.applies[cb.PayNo]++
		}
	}
	w.WriteHeader(status)
	io.WriteString(w, http.StatusText(status))
}

func (s *shop) counts() (deliveries map[string]int, applied map[string]order.Callback, applies map[int64]int, arrivals []int64, rejected int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deliveries, s.applied, s.applies, slices.Clone(s.arrivals), s.rejected
}

// start returns a started channel that Cleanup closes.
func start(t *testing.T, cfg paychan.Config) *paychan.Channel {
	t.Helper()
	if cfg.Key == nil {
		cfg.Key = testKey()
	}
	ch, err := paychan.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	return ch
}

func wait(t *testing.T, ch *paychan.Channel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ch.Wait(ctx); err != nil {
		t.Fatalf("wait: %v (%+v)", err, ch.Stats())
	}
}

// payAll pays n payments (numbers 1..n, amount 100 + number) from workers
// goroutines and returns the collections by payment number.
func payAll(t *testing.T, cl *paychan.Client, n, workers int) map[int64]order.Callback {
	t.Helper()
	var mu sync.Mutex
	got := map[int64]order.Callback{}
	next := make(chan int64)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for payNo := range next {
				cb, err := cl.Pay(context.Background(), payNo, 100+payNo, "CNY")
				if err != nil {
					t.Error(err)
					continue
				}
				mu.Lock()
				got[payNo] = cb
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- int64(i + 1)
	}
	close(next)
	wg.Wait()
	return got
}

func TestFaults(t *testing.T) {
	const n = 500
	sh, notify := newShop(t, ok)
	ch := start(t, paychan.Config{NotifyURL: notify, DropRate: 0.1, DupRate: 0.05, Jitter: 5 * time.Millisecond, Seed: 42, Retries: []time.Duration{}})
	collected := payAll(t, ch.Client(), n, 8)
	wait(t, ch)

	st := ch.Stats()
	t.Logf("%+v", st)
	deliveries, applied, applies, arrivals, rejected := sh.counts()
	var money int64
	for _, cb := range collected {
		money += cb.Amount
	}
	if st.Collections != n || st.Collected != money || len(collected) != n {
		t.Fatalf("collected %d (%d), stats %+v", len(collected), money, st)
	}
	if st.Dropped+st.Acknowledged != n || st.Refused+st.Abandoned+st.Pending+st.Failed != 0 || rejected != 0 {
		t.Fatalf("stats %+v, shop rejected %d", st, rejected)
	}
	if st.Dropped < n/20 || st.Dropped > n/5 || st.Duplicated < n/100 || st.Duplicated > n/10 {
		t.Errorf("dropped %d, duplicated %d of %d: far from the rates", st.Dropped, st.Duplicated, n)
	}
	// Every callback not dropped arrived and was applied exactly once; the
	// dropped ones never arrived; the duplicates arrived twice.
	if int64(len(applied)) != st.Acknowledged || int64(len(arrivals)) != st.Acknowledged+st.Duplicated || st.Sent != int64(len(arrivals)) {
		t.Fatalf("shop applied %d of %d requests; stats %+v", len(applied), len(arrivals), st)
	}
	twice := 0
	for payNo, cb := range collected {
		switch deliveries[cb.GatewayTxn] {
		case 0: // dropped
		case 1:
		case 2:
			twice++
		default:
			t.Errorf("pay %d delivered %d times", payNo, deliveries[cb.GatewayTxn])
		}
		if a := applied[cb.GatewayTxn]; deliveries[cb.GatewayTxn] > 0 && (applies[payNo] != 1 || a != cb) {
			t.Errorf("pay %d applied %d times as %+v, collected as %+v", payNo, applies[payNo], a, cb)
		}
	}
	if int64(twice) != st.Duplicated {
		t.Errorf("%d callbacks arrived twice, %d duplicated", twice, st.Duplicated)
	}
	if slices.IsSorted(arrivals) {
		t.Error("callbacks arrived in payment order despite the jitter")
	}
}

// The seed and payment numbers alone decide the faults, not the order of
// the payments.
func TestFaultsFollowTheSeed(t *testing.T) {
	arrived := func(seed uint64, payNos []int64) []int64 {
		sh, notify := newShop(t, ok)
		ch := start(t, paychan.Config{NotifyURL: notify, DropRate: 0.5, DupRate: 0.5, Seed: seed})
		cl := ch.Client()
		for _, payNo := range payNos {
			if _, err := cl.Pay(context.Background(), payNo, 1, "CNY"); err != nil {
				t.Fatal(err)
			}
		}
		wait(t, ch)
		_, _, _, arrivals, _ := sh.counts()
		slices.Sort(arrivals)
		return arrivals // a duplicated callback twice, a dropped one not at all
	}
	var up []int64
	for i := range 100 {
		up = append(up, int64(i+1))
	}
	down := slices.Clone(up)
	slices.Reverse(down)
	a, b, c := arrived(7, up), arrived(7, down), arrived(8, up)
	if !slices.Equal(a, b) {
		t.Errorf("seed 7 delivered %v paying up, %v paying down", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 delivered the same %v", a)
	}
}

func TestRetriesUntilAcknowledged(t *testing.T) {
	const n = 20
	sh, notify := newShop(t, func(_ order.Callback, nth int) int {
		if nth <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	ch := start(t, paychan.Config{NotifyURL: notify, Retries: []time.Duration{5 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond}})
	payAll(t, ch.Client(), n, 4)
	wait(t, ch)
	deliveries, applied, _, _, _ := sh.counts()
	if st := ch.Stats(); st.Acknowledged != n || st.Sent != 3*n || st.Failed != 2*n || len(applied) != n {
		t.Fatalf("stats %+v, applied %d", st, len(applied))
	}
	for txn, d := range deliveries {
		if d != 3 {
			t.Errorf("%s delivered %d times, want 3", txn, d)
		}
	}
}

// WeChat Pay's schedule, compressed: an answer that never comes is tried
// sixteen times, then abandoned.
func TestRetriesRunOut(t *testing.T) {
	sh, notify := newShop(t, func(order.Callback, int) int { return http.StatusServiceUnavailable })
	ch := start(t, paychan.Config{NotifyURL: notify, Scale: 1e-5})
	payAll(t, ch.Client(), 2, 2)
	wait(t, ch)
	deliveries, _, _, _, _ := sh.counts()
	if st := ch.Stats(); st.Abandoned != 2 || st.Sent != 32 || st.Failed != 32 || st.Acknowledged != 0 {
		t.Fatalf("stats %+v", st)
	}
	for txn, d := range deliveries {
		if d != 1+len(paychan.WeChatPayRetries) {
			t.Errorf("%s delivered %d times", txn, d)
		}
	}
}

func TestTimeoutIsRetried(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			io.ReadAll(r.Body) // so that the server notices the client hanging up
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	ch := start(t, paychan.Config{NotifyURL: srv.URL, Retries: []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond},
		Client: &http.Client{Timeout: 100 * time.Millisecond}})
	payAll(t, ch.Client(), 1, 1)
	wait(t, ch)
	// On a loaded machine a later answer may time out too.
	if st := ch.Stats(); st.Acknowledged != 1 || st.Failed < 1 || st.Sent != st.Failed+1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRefusalStopsRetries(t *testing.T) {
	sh, notify := newShop(t, func(cb order.Callback, _ int) int {
		if cb.PayNo%2 == 0 {
			return http.StatusUnprocessableEntity
		}
		return http.StatusOK
	})
	ch := start(t, paychan.Config{NotifyURL: notify, Retries: []time.Duration{time.Millisecond, time.Millisecond}})
	collected := payAll(t, ch.Client(), 10, 2)
	wait(t, ch)
	deliveries, _, _, _, _ := sh.counts()
	if st := ch.Stats(); st.Refused != 5 || st.Acknowledged != 5 || st.Sent != 10 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
	refusals := ch.Refusals()
	if len(refusals) != 5 {
		t.Fatalf("refusals %+v", refusals)
	}
	for _, r := range refusals {
		if r.PayNo%2 != 0 || r.Status != http.StatusUnprocessableEntity || r.Answer != "Unprocessable Entity" ||
			r.GatewayTxn != collected[r.PayNo].GatewayTxn || deliveries[r.GatewayTxn] != 1 {
			t.Errorf("refusal %+v", r)
		}
	}
}
