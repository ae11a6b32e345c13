package order_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
)

// stormOrder is what the storm knows of one order.
type stormOrder struct {
	o      order.Order
	rng    *rand.Rand
	second order.Callback // the collection of its second attempt, delivered mid-storm
}

// The line-refund storm: 40 orders of several lines, paid by callbacks each
// delivered three times at once; then 16 workers run a random script per
// order — parcels, line refunds, amount refunds, pay-backs, Ship, and the
// callback of a second attempt that collected too (a refund, not the
// order's money: it must not count against the order's refunds) — each
// request sent 1–3 times, at once or again after its answer (a client
// whose reply was lost), all orders interleaved. Afterwards, per line:
// refunded ≤ bought, shipped + cancelled ≤ bought, the parcels add up to
// the shipped count and the line refunds to the refunded one; per order:
// the status agrees with the lines, the refunds (by amount and by line) add
// up to at most what was paid, and the refunded total is the refunds paid
// back; per SKU, to the unit: sold = units of paid orders not refunded,
// available + sold = stock, nothing locked; per parcel, one event.
//
// It runs on a single Redis and on a Redis Cluster (the delay queue's).
func TestLineRefundStormBalances(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) { lineRefundStorm(t, setupOn(t, r, order.Config{})) })
}

func lineRefundStorm(t *testing.T, f *fixture) {
	ctx := context.Background()
	skus := map[string]int64{"a": 100, "b": 250, "c": 399, "d": 7}
	const initial = 1000
	for sku, price := range skus {
		f.sku(sku, price, initial)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	names := []string{"a", "b", "c", "d"}
	const orders = 40
	var all []*stormOrder
	var cbs []order.Callback
	for i := range orders {
		var lines []order.Line
		for _, j := range rng.Perm(4)[:1+rng.IntN(3)] {
			lines = append(lines, order.Line{SKU: names[j], Qty: int64(1 + rng.IntN(4))})
		}
		o := f.create(fmt.Sprint("u", i%9), fmt.Sprint("r", i), lines...)
		p, err := f.s.StartPaymentRequest(ctx, o.ID, "wechat", "pay-1")
		if err != nil {
			t.Fatal(err)
		}
		p2, err := f.s.StartPaymentRequest(ctx, o.ID, "alipay", "pay-2")
		if err != nil {
			t.Fatal(err)
		}
		cbs = append(cbs, order.Callback{PayNo: p.PayNo, GatewayTxn: fmt.Sprint("wx-", i), Amount: p.Amount, Currency: p.Currency, Success: true})
		all = append(all, &stormOrder{o: o, rng: rand.New(rand.NewPCG(uint64(i), 5)),
			second: order.Callback{PayNo: p2.PayNo, GatewayTxn: fmt.Sprint("ali-", i), Amount: p2.Amount, Currency: p2.Currency, Success: true}})
	}
	var wg sync.WaitGroup
	for _, cb := range cbs {
		for range 3 {
			wg.Go(func() {
				if out, err := f.s.HandleCallback(ctx, cb); err != nil || out != order.OutcomePaid {
					t.Errorf("callback %s: %s, %v", cb.GatewayTxn, out, err)
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	// Each order's script, run by the workers in slices so orders interleave.
	type step func() error
	scripts := make([][]step, len(all))
	for i, so := range all {
		for k := range 10 {
			scripts[i] = append(scripts[i], f.stormStep(so, k))
		}
		scripts[i][rng.IntN(10)] = func() error { // the second attempt's money arrives, twice at once: a refund
			outs := make([]order.Outcome, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for j := range 2 {
				wg.Go(func() { outs[j], errs[j] = f.s.HandleCallback(ctx, so.second) })
			}
			wg.Wait()
			if outs[0] != order.OutcomeRefund || outs[1] != order.OutcomeRefund || errors.Join(errs...) != nil {
				return fmt.Errorf("order %d: second collection %v, %v", so.o.ID, outs, errs)
			}
			return nil
		}
	}
	work := make(chan step)
	for range 16 {
		wg.Go(func() {
			for st := range work {
				if err := st(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for k := range 10 {
		for _, i := range rng.Perm(len(all)) {
			work <- scripts[i][k]
		}
	}
	close(work)
	wg.Wait()
	if rep, err := f.s.Sweep(ctx, 1000); err != nil || rep.Restocked != 0 {
		t.Fatalf("sweep after the storm: %+v, %v (nothing should be left unrestocked)", rep, err)
	}

	sold := map[string]int64{}
	var parcelCount, lineRefunds, amountRefunds int
	statuses := map[order.Status]int{}
	pub := &memPub{}
	f.relayAll(pub)
	events := pub.events(t)
	for _, so := range all {
		o := f.get(so.o.ID)
		parcels, err := f.s.Parcels(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		refunds, err := f.s.Refunds(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		shippedBy, refundedBy := map[string]int64{}, map[string]int64{}
		for _, p := range parcels {
			parcelCount++
			if events[fmt.Sprint("p", p.ParcelNo)] != 1 {
				t.Errorf("order %d: parcel %d announced %d times", o.ID, p.ParcelNo, events[fmt.Sprint("p", p.ParcelNo)])
			}
			for _, l := range p.Lines {
				shippedBy[l.SKU] += l.Qty
			}
		}
		var requested, done int64
		statuses[o.Status]++
		strays := 0
		for _, r := range refunds {
			if r.PayNo != o.PayNo { // the second attempt's money: not the order's
				if strays++; r.PayNo != so.second.PayNo || r.Amount != so.second.Amount || r.Lines != nil {
					t.Errorf("order %d: refund %+v of another payment", o.ID, r)
				}
				continue
			}
			if r.Lines != nil {
				lineRefunds++
			} else {
				amountRefunds++
			}
			requested += r.Amount
			if r.Status == order.RefundDone {
				done += r.Amount
			}
			var value int64
			for _, l := range r.Lines {
				refundedBy[l.SKU] += l.Qty
				value += l.Amount
				if !l.Restocked || l.Amount != l.Qty*skus[l.SKU] {
					t.Errorf("order %d: refund line %+v (price %d)", o.ID, l, skus[l.SKU])
				}
			}
			if r.Lines != nil && value != r.Amount {
				t.Errorf("order %d: refund %d of %d, its lines %d", o.ID, r.RefundNo, r.Amount, value)
			}
		}
		if strays != 1 {
			t.Errorf("order %d: %d refunds of its second attempt, want 1", o.ID, strays)
		}
		var left, shipped int64
		for _, it := range o.Items {
			cancelled := min(it.Refunded, it.Qty-it.Shipped)
			if it.Refunded > it.Qty || it.Shipped+cancelled > it.Qty || it.Shipped != shippedBy[it.SKU] || it.Refunded != refundedBy[it.SKU] {
				t.Errorf("order %d line %+v: parcels ship %d, refunds give back %d", o.ID, it, shippedBy[it.SKU], refundedBy[it.SKU])
			}
			sold[it.SKU] += it.Qty - it.Refunded
			left += it.ToShip()
			shipped += it.Shipped
		}
		if requested > o.Amount || done != o.Refunded || (o.Status == order.Refunded) != (done == o.Amount) {
			t.Errorf("order %d (%s, %d paid): %d requested back, %d paid back, refunded %d", o.ID, o.Status, o.Amount, requested, done, o.Refunded)
		}
		ok := map[order.Status]bool{
			order.Paid:             shipped == 0 && requested < o.Amount,
			order.PartiallyShipped: shipped > 0 && left > 0 && requested < o.Amount,
			order.Shipped:          shipped > 0 && left == 0 && requested < o.Amount,
			order.Refunding:        requested > done,
			order.Refunded:         done == o.Amount,
		}[o.Status]
		if !ok {
			t.Errorf("order %d is %s with %d shipped, %d left to ship, %d of %d requested back, %d paid back", o.ID, o.Status, shipped, left, requested, o.Amount, done)
		}
	}
	for sku := range skus {
		st := f.stock(sku)
		if st.Locked != 0 || st.Sold != sold[sku] || st.Available+st.Sold != initial {
			t.Errorf("%s: %+v; paid orders keep %d units", sku, st, sold[sku])
		}
	}
	t.Logf("%d orders, %d parcels, %d line refunds, %d amount refunds; statuses %v", orders, parcelCount, lineRefunds, amountRefunds, statuses)
}

// stormStep returns step k of order so's script: one random request, sent
// 1–3 times — at once, and again after an answer — with the same request
// id, every answer checked against the first.
func (f *fixture) stormStep(so *stormOrder, k int) func() error {
	ctx := context.Background()
	rng := so.rng
	id := so.o.ID
	it := so.o.Items[rng.IntN(len(so.o.Items))]
	req := fmt.Sprint("s", k)
	var op func() (int64, error) // the request; its result's number
	switch rng.IntN(6) {
	case 0, 1:
		lines := []order.Line{{SKU: it.SKU, Qty: int64(1 + rng.IntN(2))}}
		op = func() (int64, error) {
			p, _, err := f.s.ShipParcel(ctx, id, order.NewParcel{RequestID: req, Lines: lines})
			return p.ParcelNo, err
		}
	case 2, 3:
		lines := []order.Line{{SKU: it.SKU, Qty: 1}}
		if other := so.o.Items[rng.IntN(len(so.o.Items))]; other.SKU != it.SKU {
			lines = append(lines, order.Line{SKU: other.SKU, Qty: 1})
		}
		op = func() (int64, error) {
			r, err := f.s.RefundLines(ctx, id, lines, "return", req)
			return r.RefundNo, err
		}
	case 4:
		amount := int64(1 + rng.IntN(300))
		op = func() (int64, error) {
			r, err := f.s.RequestRefund(ctx, id, amount, "goodwill", req)
			return r.RefundNo, err
		}
	default:
		shipToo := rng.IntN(2) == 0
		op = func() (int64, error) { // the refund job pays back what is due, and fulfilment ships the rest
			rs, err := f.s.Refunds(ctx, id)
			for _, r := range rs {
				if r.Status == order.RefundRequested && err == nil {
					_, err = f.s.RefundPaid(ctx, r.RefundNo)
				}
			}
			if err == nil && shipToo {
				_, err = f.s.Ship(ctx, id)
			}
			return -1, err
		}
	}
	sends := 1 + rng.IntN(3)
	return func() error {
		results := make([]int64, sends)
		errs := make([]error, sends)
		var wg sync.WaitGroup
		for i := range sends - 1 { // at once
			wg.Go(func() { results[i], errs[i] = op() })
		}
		wg.Wait()
		results[sends-1], errs[sends-1] = op() // again, after the answers
		first := int64(0)
		for i, err := range errs {
			switch {
			case err == nil && first == 0:
				first = results[i]
			case err == nil && results[i] != first:
				return fmt.Errorf("order %d, request %s: answers %v", id, req, results)
			case err == nil, errors.Is(err, order.ErrQuantity), errors.Is(err, order.ErrRefundTooLarge), errors.Is(err, order.ErrIllegalTransition):
				// refused for the order's state: other steps of its script
				// run beside this one
			default:
				return fmt.Errorf("order %d, request %s: %w", id, req, err)
			}
		}
		if first != 0 && errs[sends-1] != nil {
			return fmt.Errorf("order %d, request %s: a repeat after a success failed: %v", id, req, errs)
		}
		return nil
	}
}
