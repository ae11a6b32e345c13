package order_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
)

// A storm of callbacks — each delivered 20 times, shuffled, concurrently,
// racing the timeouts of half the orders — pays each order at most once,
// turns every payment that arrived after its order closed into a refund, and
// the money balances to the fen: collected = paid orders + refunds due.
func TestCallbackStormBalances(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{PayTimeout: time.Minute})
	f.sku("s", 1234, 1000)
	const orders = 60
	var cbs []order.Callback
	attemptsOf := map[int64]int{}
	for i := range orders {
		o := f.create(fmt.Sprint("u", i%7), fmt.Sprint("r", i), order.Line{SKU: "s", Qty: int64(1 + i%3)})
		attempts := 1 + i%2 // every other order gets two attempts, both collected
		attemptsOf[o.ID] = attempts
		for a := range attempts {
			p, err := f.s.StartPayment(ctx, o.ID, "wechat")
			if err != nil {
				t.Fatal(err)
			}
			cbs = append(cbs, order.Callback{PayNo: p.PayNo, GatewayTxn: fmt.Sprintf("wx-%d-%d", i, a), Amount: p.Amount, Currency: p.Currency, Success: true})
		}
	}
	var deliveries []order.Callback
	for _, cb := range cbs {
		for range 20 {
			deliveries = append(deliveries, cb)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	var wg sync.WaitGroup
	work := make(chan order.Callback)
	for range 16 {
		wg.Go(func() {
			for cb := range work {
				if _, err := f.s.HandleCallback(ctx, cb); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Go(func() { // the deadline passes mid-storm; timeouts race the callbacks
		time.Sleep(20 * time.Millisecond)
		f.clk.Add(2 * time.Minute)
		for range 5 {
			if _, err := f.s.RunDue(ctx, 100); err != nil {
				t.Error(err)
			}
			if _, err := f.s.Sweep(ctx, 100); err != nil {
				t.Error(err)
			}
		}
	})
	for _, cb := range deliveries {
		work <- cb
	}
	close(work)
	wg.Wait()
	f.s.Sweep(ctx, 1000)

	var collected, paidOrders, refunds, closed, paid int64
	for _, cb := range cbs {
		collected += cb.Amount
	}
	seenOrders := map[int64]bool{}
	for _, cb := range cbs {
		p, err := f.s.PaymentOf(ctx, cb.PayNo)
		if err != nil || p.Status != order.PaymentSucceeded {
			t.Fatalf("payment %d: %+v %v", cb.PayNo, p, err)
		}
		if seenOrders[p.OrderID] {
			continue
		}
		seenOrders[p.OrderID] = true
		o := f.get(p.OrderID)
		rs, _ := f.s.Refunds(ctx, o.ID)
		for _, r := range rs {
			refunds += r.Amount
		}
		switch o.Status {
		case order.Paid:
			paid++
			paidOrders += o.Amount
			if len(rs) != attemptsOf[o.ID]-1 || o.PayNo == 0 {
				t.Fatalf("paid order %d with %d attempts has %d refunds", o.ID, attemptsOf[o.ID], len(rs))
			}
		case order.Closed:
			closed++
			if len(rs) != attemptsOf[o.ID] {
				t.Fatalf("closed order %d collected %d times, has %d refunds", o.ID, attemptsOf[o.ID], len(rs))
			}
		default:
			t.Fatalf("order %d ended %s", o.ID, o.Status)
		}
	}
	if collected != paidOrders+refunds {
		t.Fatalf("collected %d ≠ paid orders %d + refunds %d", collected, paidOrders, refunds)
	}
	if paid == 0 || paid+closed != orders {
		t.Fatalf("%d paid, %d closed of %d", paid, closed, orders)
	}
	st := f.stock("s")
	if st.Locked != 0 || st.Available+st.Sold != 1000 {
		t.Fatalf("stock after the storm: %+v", st)
	}
	t.Logf("%d paid, %d closed with refunds, %d collected", paid, closed, collected)
}

// A refused callback (amount, currency) is recorded and changes nothing
// else; an unknown payment writes nothing; a failed one is recorded.
func TestCallbackRefusals(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("s", 1000, 10)
	o := f.create("u", "r", order.Line{SKU: "s", Qty: 1})
	p, _ := f.s.StartPayment(ctx, o.ID, "wechat")
	for _, cb := range []order.Callback{
		{PayNo: p.PayNo, GatewayTxn: "t1", Amount: 1, Currency: "CNY", Success: true},
		{PayNo: p.PayNo, GatewayTxn: "t2", Amount: 1000, Currency: "USD", Success: true},
	} {
		out, err := f.s.HandleCallback(ctx, cb)
		if !errors.Is(err, order.ErrCallback) || out != order.OutcomeRejected {
			t.Fatalf("%+v: %s %v", cb, out, err)
		}
		if again, err := f.s.HandleCallback(ctx, cb); again != order.OutcomeRejected || err != nil {
			t.Fatalf("repeat of a refused callback: %s %v", again, err)
		}
	}
	if _, err := f.s.HandleCallback(ctx, order.Callback{PayNo: p.PayNo + 1<<20, GatewayTxn: "t3", Amount: 1000, Currency: "CNY", Success: true}); !errors.Is(err, order.ErrCallback) {
		t.Fatalf("unknown payment: %v", err)
	}
	if out, err := f.s.HandleCallback(ctx, order.Callback{PayNo: p.PayNo, GatewayTxn: "t4", Amount: 1000, Currency: "CNY", Success: false}); out != order.OutcomeFailed || err != nil {
		t.Fatalf("failed attempt: %s %v", out, err)
	}
	if got := f.get(o.ID); got.Status != order.Pending || got.Version != o.Version {
		t.Fatalf("refused callbacks changed the order: %+v", got)
	}
	if out, err := f.s.HandleCallback(ctx, order.Callback{PayNo: p.PayNo, GatewayTxn: "t5", Amount: 1000, Currency: "CNY", Success: true}); out != order.OutcomePaid || err != nil {
		t.Fatalf("good callback after refusals: %s %v", out, err)
	}
}

// Partial refunds add up to the paid amount; the last one makes the order
// Refunded; more is refused.
func TestRefunds(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("s", 1000, 10)
	o := f.create("u", "r", order.Line{SKU: "s", Qty: 3})
	f.pay(o, "tx")
	r1, err := f.s.RequestRefund(ctx, o.ID, 1000, "damaged", "a")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := f.s.RequestRefund(ctx, o.ID, 1000, "damaged", "a"); again.RefundNo != r1.RefundNo {
		t.Fatalf("repeated refund request made %d and %d", r1.RefundNo, again.RefundNo)
	}
	if _, err := f.s.RequestRefund(ctx, o.ID, 1, "more", "b"); !errors.Is(err, order.ErrIllegalTransition) {
		t.Fatalf("refund while refunding: %v", err)
	}
	f.s.RefundPaid(ctx, r1.RefundNo)
	f.s.RefundPaid(ctx, r1.RefundNo)
	if got := f.get(o.ID); got.Status != order.Paid || got.Refunded != 1000 {
		t.Fatalf("after a partial refund: %+v", got)
	}
	if _, err := f.s.RequestRefund(ctx, o.ID, 2001, "rest", "c"); !errors.Is(err, order.ErrRefundTooLarge) {
		t.Fatalf("refund above the rest: %v", err)
	}
	r2, _ := f.s.RequestRefund(ctx, o.ID, 2000, "rest", "d")
	f.s.RefundPaid(ctx, r2.RefundNo)
	if got := f.get(o.ID); got.Status != order.Refunded || got.Refunded != 3000 {
		t.Fatalf("after the full refund: %+v", got)
	}
}

// Timeouts through the Redis delay queue, and through the SQL sweeper when
// Redis lost the queue; paid orders are untouched; shipped ones complete.
func TestTimeouts(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{PayTimeout: 30 * time.Minute, AutoComplete: 240 * time.Hour})
	f.sku("s", 100, 10)
	a := f.create("u", "a", order.Line{SKU: "s", Qty: 1})
	b := f.create("u", "b", order.Line{SKU: "s", Qty: 1})
	c := f.create("u", "c", order.Line{SKU: "s", Qty: 1})
	f.pay(c, "tx-c")
	f.s.Ship(ctx, c.ID)
	f.clk.Add(29 * time.Minute)
	if n, _ := f.s.RunDue(ctx, 100); n != 0 {
		t.Fatalf("%d moved before the deadline", n)
	}
	f.clk.Add(2 * time.Minute)
	if n, err := f.s.RunDue(ctx, 100); err != nil || n != 2 {
		t.Fatalf("RunDue moved %d: %v", n, err)
	}
	for _, o := range []order.Order{a, b} {
		if got := f.get(o.ID); got.Status != order.Closed || got.CloseReason != order.ReasonTimeout {
			t.Fatalf("%+v", got)
		}
	}
	if st := f.stock("s"); st.Available != 9 || st.Locked != 0 || st.Sold != 1 {
		t.Fatalf("stock after timeouts: %+v", st)
	}
	// Redis forgets the queues (a failover): the sweeper still closes.
	d := f.create("u", "d", order.Line{SKU: "s", Qty: 1})
	testenv.DeleteKeys(ctx, f.r.Client, f.r.Namespace+"*")
	f.clk.Add(31 * time.Minute)
	if n, _ := f.s.RunDue(ctx, 100); n != 0 {
		t.Fatalf("an emptied queue moved %d", n)
	}
	rep, err := f.s.Sweep(ctx, 100)
	if err != nil || rep.Closed != 1 || f.get(d.ID).Status != order.Closed {
		t.Fatalf("sweep %+v: %v", rep, err)
	}
	f.clk.Add(240 * time.Hour)
	if rep, _ := f.s.Sweep(ctx, 100); rep.Completed != 1 || f.get(c.ID).Status != order.Completed {
		t.Fatalf("auto-complete: %+v", rep)
	}
}

func signed(t *testing.T, v order.HMACVerifier, body string, at time.Time) *http.Request {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/pay/notify", strings.NewReader(body))
	ts, sig := v.Sign([]byte(body), at)
	req.Header.Set(order.HeaderTimestamp, ts)
	req.Header.Set(order.HeaderSignature, sig)
	return req
}

// The callback endpoint: a bad signature, an old timestamp, a tampered or
// malformed or oversize body, an unknown payment → 4xx and nothing written;
// a good callback → 200 paid; its replay → 200, same outcome, no write.
func TestCallbackHandler(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("s", 500, 10)
	o := f.create("u", "r", order.Line{SKU: "s", Qty: 1})
	p, _ := f.s.StartPayment(ctx, o.ID, "wechat")
	v := order.HMACVerifier{Key: []byte("secret"), Now: f.clk.Now}
	h := f.s.CallbackHandler(v)
	good := fmt.Sprintf(`{"pay_no":%d,"gateway_txn":"wx-9","amount":500,"currency":"CNY","success":true}`, p.PayNo)
	serve := func(req *http.Request) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	tampered := signed(t, v, good, f.clk.Now())
	tampered.Body = httpBody(strings.Replace(good, `"amount":500`, `"amount":1`, 1))
	wrongKey := signed(t, order.HMACVerifier{Key: []byte("guess")}, good, f.clk.Now())
	get := signed(t, v, good, f.clk.Now())
	get.Method = http.MethodGet
	for name, c := range map[string]struct {
		req  *http.Request
		code int
	}{
		"wrong key":       {wrongKey, 401},
		"tampered body":   {tampered, 401},
		"stale timestamp": {signed(t, v, good, f.clk.Now().Add(-10*time.Minute)), 401},
		"future":          {signed(t, v, good, f.clk.Now().Add(10*time.Minute)), 401},
		"unsigned":        {httptest.NewRequest(http.MethodPost, "/", strings.NewReader(good)), 401},
		"trailing data":   {signed(t, v, good+` {"x":1}`, f.clk.Now()), 400},
		"unknown field":   {signed(t, v, strings.Replace(good, `"success"`, `"price":1,"success"`, 1), f.clk.Now()), 400},
		"not json":        {signed(t, v, "pay_no=1", f.clk.Now()), 400},
		"null":            {signed(t, v, "null", f.clk.Now()), 400},
		"empty object":    {signed(t, v, "{}", f.clk.Now()), 400},
		"amount twice":    {signed(t, v, strings.Replace(good, `"amount":500`, `"amount":500,"amount":1`, 1), f.clk.Now()), 400},
		"AMOUNT beside":   {signed(t, v, strings.Replace(good, `"amount":500`, `"amount":500,"AMOUNT":1`, 1), f.clk.Now()), 400},
		"Amount for it":   {signed(t, v, strings.Replace(good, `"amount":500`, `"Amount":500`, 1), f.clk.Now()), 400},
		"no amount":       {signed(t, v, strings.Replace(good, `"amount":500,`, ``, 1), f.clk.Now()), 400},
		"oversize":        {signed(t, v, good+strings.Repeat(" ", order.MaxCallbackBody), f.clk.Now()), 413},
		"unknown payment": {signed(t, v, strings.Replace(good, fmt.Sprint(p.PayNo), fmt.Sprint(p.PayNo+1<<20), 1), f.clk.Now()), 422},
		"GET":             {get, 405},
	} {
		if code, body := serve(c.req); code != c.code {
			t.Errorf("%s: %d %s, want %d", name, code, body, c.code)
		}
	}
	if got := f.get(o.ID); got.Status != order.Pending || got.Version != o.Version {
		t.Fatalf("refused requests changed the order: %+v", got)
	}
	for range 3 {
		if code, body := serve(signed(t, v, good, f.clk.Now())); code != 200 || !strings.Contains(body, `"paid"`) {
			t.Fatalf("good callback: %d %s", code, body)
		}
	}
	if got := f.get(o.ID); got.Status != order.Paid || got.Version != o.Version+1 {
		t.Fatalf("after the callback and its replays: %+v", got)
	}
}

func httpBody(s string) *readCloser { return &readCloser{bytes.NewReader([]byte(s))} }

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// fakeChannel knows some collections whose callbacks never arrived.
type fakeChannel map[int64]order.Callback

func (c fakeChannel) Query(_ context.Context, payNo int64) (order.Callback, bool, error) {
	cb, ok := c[payNo]
	return cb, ok, nil
}

// Lost callbacks are recovered by asking the channel before the deadline:
// the collected order is paid, the uncollected one closes at its deadline.
func TestRecoverPaymentsByQuery(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{PayTimeout: 30 * time.Minute})
	f.sku("s", 100, 10)
	paid := f.create("u1", "r", order.Line{SKU: "s", Qty: 1})
	unpaid := f.create("u2", "r", order.Line{SKU: "s", Qty: 1})
	p1, _ := f.s.StartPayment(ctx, paid.ID, "wechat")
	f.s.StartPayment(ctx, unpaid.ID, "wechat")
	ch := fakeChannel{p1.PayNo: {PayNo: p1.PayNo, GatewayTxn: "wx-lost", Amount: p1.Amount, Currency: p1.Currency, Success: true}}
	if n, err := f.s.RecoverPayments(ctx, ch, 5*time.Minute, 100); err != nil || n != 0 {
		t.Fatalf("25 min early: recovered %d, %v", n, err)
	}
	f.clk.Add(26 * time.Minute)
	for range 2 {
		if n, err := f.s.RecoverPayments(ctx, ch, 5*time.Minute, 100); err != nil || n > 1 {
			t.Fatalf("recovered %d, %v", n, err)
		}
	}
	if got := f.get(paid.ID); got.Status != order.Paid || got.PayNo != p1.PayNo {
		t.Fatalf("the collected order: %+v", got)
	}
	f.clk.Add(5 * time.Minute)
	f.s.Sweep(ctx, 100)
	if got := f.get(unpaid.ID); got.Status != order.Closed {
		t.Fatalf("the uncollected order: %s", got.Status)
	}
}

// A buyer pays an attempt at the channel after its order closed, and the
// callback is lost: the active query still asks about attempts of orders
// closed within RecoverLookback, and the money becomes a refund; past the
// lookback it is left to Reconcile.
func TestRecoverPaymentAfterClose(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{PayTimeout: 30 * time.Minute})
	f.sku("s", 100, 10)
	late := f.create("u1", "r", order.Line{SKU: "s", Qty: 1})
	old := f.create("u2", "r", order.Line{SKU: "s", Qty: 1})
	p1, _ := f.s.StartPayment(ctx, late.ID, "wechat")
	p2, _ := f.s.StartPayment(ctx, old.ID, "wechat")
	f.clk.Add(31 * time.Minute)
	if _, err := f.s.Sweep(ctx, 100); err != nil {
		t.Fatal(err)
	}
	ch := fakeChannel{}
	if n, err := f.s.RecoverPayments(ctx, ch, time.Minute, 100); err != nil || n != 0 {
		t.Fatalf("nothing collected yet: recovered %d, %v", n, err)
	}
	ch[p1.PayNo] = order.Callback{PayNo: p1.PayNo, GatewayTxn: "wx-late", Amount: p1.Amount, Currency: p1.Currency, Success: true, PaidAt: f.clk.Now()}
	if n, err := f.s.RecoverPayments(ctx, ch, time.Minute, 100); err != nil || n != 1 {
		t.Fatalf("collected after the close: recovered %d, %v; want 1", n, err)
	}
	if got := f.get(late.ID); got.Status != order.Closed {
		t.Fatalf("money after the close paid the order: %s", got.Status)
	}
	if rs, err := f.s.Refunds(ctx, late.ID); err != nil || len(rs) != 1 || rs[0].Amount != p1.Amount || rs[0].PayNo != p1.PayNo {
		t.Fatalf("refunds of the late payment: %+v, %v", rs, err)
	}
	f.clk.Add(order.RecoverLookback + time.Minute)
	ch[p2.PayNo] = order.Callback{PayNo: p2.PayNo, GatewayTxn: "wx-older", Amount: p2.Amount, Currency: p2.Currency, Success: true, PaidAt: f.clk.Now()}
	if n, err := f.s.RecoverPayments(ctx, ch, time.Minute, 100); err != nil || n != 0 {
		t.Fatalf("an order closed past the lookback: recovered %d, %v; want 0 (Reconcile's)", n, err)
	}
}

// RSA-signed callbacks: the right key passes; a wrong key, a tampered body
// or an old timestamp is refused.
func TestRSAVerifier(t *testing.T) {
	key, err := rsa.GenerateKey(crand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(crand.Reader, 2048)
	now := testenv.Now().UTC().Truncate(time.Second)
	v := order.RSAVerifier{Key: &key.PublicKey, Now: func() time.Time { return now }}
	body := []byte(`{"pay_no":1}`)
	header := func(k *rsa.PrivateKey, b []byte, at time.Time) http.Header {
		ts, sig, err := order.SignRSA(k, b, at)
		if err != nil {
			t.Fatal(err)
		}
		return http.Header{order.HeaderTimestamp: {ts}, order.HeaderSignature: {sig}}
	}
	if err := v.Verify(header(key, body, now), body); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		h    http.Header
		body []byte
	}{
		"wrong key": {header(other, body, now), body},
		"tampered":  {header(key, body, now), []byte(`{"pay_no":2}`)},
		"stale":     {header(key, body, now.Add(-time.Hour)), body},
		"unsigned":  {http.Header{}, body},
	} {
		if err := v.Verify(c.h, c.body); !errors.Is(err, order.ErrSignature) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
