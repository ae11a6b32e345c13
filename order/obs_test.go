package order_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/order"
)

// TestMetricsAndSpans: a scripted run read with the SDK's manual reader
// and an in-memory span exporter — three orders and a bad one, callbacks
// applied, replayed, forged, mismatched and for an unknown payment, refunds
// requested, repeated and paid back, a timeout — with every operation, every
// callback and refund result, the overdue gauge and the spans exact.
func TestMetricsAndSpans(t *testing.T) {
	ctx := context.Background()
	reader, mp, spans, tp := obstest.NewSDK()
	f := setup(t, order.Config{MeterProvider: mp, TracerProvider: tp}) // migrate 1
	f.sku("tea", 100, 10)                                              // put_sku 1
	o1 := f.create("ann", "c1", order.Line{SKU: "tea", Qty: 2})        // create 1
	o2 := f.create("bob", "c1", order.Line{SKU: "tea", Qty: 2})        // create 2
	o3 := f.create("cid", "c1", order.Line{SKU: "tea", Qty: 1})        // create 3
	if _, err := f.s.Create(ctx, order.NewOrder{User: "", RequestID: "c1", Lines: []order.Line{{SKU: "tea", Qty: 1}}}); !errors.Is(err, order.ErrInvalid) {
		t.Fatalf("an order without a user: %v", err)
	}

	p1, out := f.pay(o1, "wx-1") // start_payment 1, handle_callback 1: paid
	if out != order.OutcomePaid {
		t.Fatalf("first callback: %s", out)
	}
	cb1 := order.Callback{PayNo: p1.PayNo, GatewayTxn: "wx-1", Amount: p1.Amount, Currency: p1.Currency, Success: true, PaidAt: f.clk.Now()}
	if out, err := f.s.HandleCallback(ctx, cb1); err != nil || out != order.OutcomePaid { // replayed
		t.Fatalf("replayed callback: %s, %v", out, err)
	}
	p2, err := f.s.StartPayment(ctx, o2.ID, "wechat") // start_payment 2
	if err != nil {
		t.Fatal(err)
	}
	short := order.Callback{PayNo: p2.PayNo, GatewayTxn: "wx-2", Amount: p2.Amount - 1, Currency: p2.Currency, Success: true}
	if _, err := f.s.HandleCallback(ctx, short); !errors.Is(err, order.ErrCallback) {
		t.Fatalf("a callback for less than the payment: %v", err)
	}
	unknown := order.Callback{PayNo: p2.PayNo + 1<<20, GatewayTxn: "wx-3", Amount: p2.Amount, Currency: p2.Currency, Success: true}
	if _, err := f.s.HandleCallback(ctx, unknown); !errors.Is(err, order.ErrCallback) {
		t.Fatalf("a callback for an unknown payment: %v", err)
	}
	v := order.HMACVerifier{Key: []byte("secret"), Now: f.clk.Now}
	h := f.s.CallbackHandler(v)
	good := fmt.Sprintf(`{"pay_no":%d,"gateway_txn":"wx-4","amount":%d,"currency":"CNY","success":true}`, p2.PayNo, p2.Amount)
	for _, c := range []struct {
		req  *http.Request
		code int
	}{
		{signed(t, order.HMACVerifier{Key: []byte("guess")}, good, f.clk.Now()), http.StatusUnauthorized}, // forged
		{signed(t, v, "{}", f.clk.Now()), http.StatusBadRequest},                                          // malformed
		{signed(t, v, good, f.clk.Now()), http.StatusOK},                                                  // paid
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, c.req)
		if w.Code != c.code {
			t.Fatalf("callback request: %d %s, want %d", w.Code, w.Body, c.code)
		}
	}

	r, err := f.s.RequestRefund(ctx, o1.ID, 50, "goodwill", "rf-1") // requested (amount)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := f.s.RequestRefund(ctx, o1.ID, 50, "goodwill", "rf-1"); err != nil || again.RefundNo != r.RefundNo { // replayed
		t.Fatalf("repeated refund request: %+v, %v", again, err)
	}
	if _, err := f.s.RefundPaid(ctx, r.RefundNo); err != nil { // paid_back
		t.Fatal(err)
	}
	if _, err := f.s.RefundLines(ctx, o2.ID, []order.Line{{SKU: "tea", Qty: 1}}, "return", "rf-2"); err != nil { // requested (lines)
		t.Fatal(err)
	}
	if _, err := f.s.RefundLines(ctx, o2.ID, []order.Line{{SKU: "tea", Qty: 5}}, "return", "rf-3"); !errors.Is(err, order.ErrQuantity) {
		t.Fatalf("refunding more units than bought: %v", err)
	}
	if _, err := f.s.Ship(ctx, o1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Ship(ctx, o3.ID); !errors.Is(err, order.ErrIllegalTransition) {
		t.Fatalf("shipping an unpaid order: %v", err)
	}
	if _, err := f.s.Get(ctx, 0); !errors.Is(err, order.ErrInvalid) {
		t.Fatalf("order 0: %v", err)
	}

	f.clk.Add(31 * time.Minute) // o3 is past its deadline
	if got := obstest.Points(t, reader)["casebook.order.overdue"]; got != 1 {
		t.Errorf("overdue gauge before the sweep: %v, want 1", got)
	}
	if rep, err := f.s.Sweep(ctx, 10); err != nil || rep.Closed != 1 {
		t.Fatalf("sweep: %+v, %v", rep, err)
	}

	got := obstest.Points(t, reader)
	want := map[string]float64{
		"casebook.order.overdue": 0,
		"casebook.order.callbacks casebook.order.callback.result=paid":                                    2,
		"casebook.order.callbacks casebook.order.callback.result=replayed":                                1,
		"casebook.order.callbacks casebook.order.callback.result=amount_mismatch":                         1,
		"casebook.order.callbacks casebook.order.callback.result=unknown_payment":                         1,
		"casebook.order.callbacks casebook.order.callback.result=forged":                                  1,
		"casebook.order.callbacks casebook.order.callback.result=malformed":                               1,
		"casebook.order.refunds casebook.order.refund.kind=amount,casebook.order.refund.result=requested": 1,
		"casebook.order.refunds casebook.order.refund.kind=lines,casebook.order.refund.result=requested":  1,
		"casebook.order.refunds casebook.order.refund.result=replayed":                                    1,
		"casebook.order.refunds casebook.order.refund.result=paid_back":                                   1,
	}
	wantSpans := map[string]int{}
	for _, c := range []struct {
		name, outcome, reason string
		n                     int
	}{
		{"migrate", "ok", "", 1},
		{"put_sku", "ok", "", 1},
		{"create", "ok", "", 3}, {"create", "refused", "invalid", 1},
		{"start_payment", "ok", "", 2},
		{"handle_callback", "ok", "", 2},
		{"handle_callback", "refused", "amount_mismatch", 1}, {"handle_callback", "refused", "unknown_payment", 1},
		{"serve_callback", "ok", "", 1},
		{"serve_callback", "refused", "signature", 1}, {"serve_callback", "refused", "invalid", 1},
		{"request_refund", "ok", "", 2},
		{"refund_paid", "ok", "", 1},
		{"refund_lines", "ok", "", 1}, {"refund_lines", "refused", "quantity", 1},
		{"ship", "ok", "", 1}, {"ship", "refused", "illegal_transition", 1},
		{"get", "refused", "invalid", 1},
		{"sweep", "ok", "", 1},
	} {
		obstest.AddOp(want, "order", c.name, c.outcome, c.reason, float64(c.n))
		wantSpans["order."+c.name] += c.n
	}
	obstest.Expect(t, got, want)
	obstest.ExpectSpans(t, spans, wantSpans)

	for range 2 {
		if err := f.s.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
	}
	if _, ok := obstest.Points(t, reader)["casebook.order.overdue"]; ok {
		t.Error("the overdue gauge still reports after Close")
	}
}
