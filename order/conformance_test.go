package order_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
)

// conformance is one service whose databases or Redis are reached through
// a fault proxy; each case of the suite sells its own SKU to its own buyers.
type conformance struct {
	t     *testing.T
	s     *order.Service
	proxy *testenv.Proxy // the one the faults go through
	clk   *testenv.Clock
}

// The order block's invariants hold after each SQL network fault, once the
// fault is healed and the block's own repair (client retries by request id,
// gateway redeliveries, Sweep) has run: stock is never oversold nor
// undersold (available + locked + sold = initial, sold = units of paid
// orders not refunded by line), an order is paid at most once, each paid
// order ships in two parcels and refunds its lines exactly once, and every
// fen the gateway collected is either an order's payment or a refund.
func TestConformanceSQLFaults(t *testing.T) {
	f := testenv.NewFaultySQL(t, 2)
	c := newConformance(t, f.DBs, testenv.NewRedis(t), f.Proxy)
	c.run([]fault{
		{"sql latency", func(<-chan struct{}) { f.Latency(15*time.Millisecond, 10*time.Millisecond) }},
		{"sql connections reset", c.flap(30*time.Millisecond, 100*time.Millisecond, f.Reset)},
		{"sql connections cut mid-transaction", func(<-chan struct{}) { f.CutAfter(3000) }},
		{"sql commit replies lost", c.flap(40*time.Millisecond, 40*time.Millisecond, func() { f.DropReplyTo("COMMIT", 2) })},
		{"sql black hole", c.flap(300*time.Millisecond, 200*time.Millisecond, f.BlackHole)},
	})
}

// The same invariants after Redis faults: Redis holds only the delay
// queues, so a lost entry (a ZADD that failed, a popped batch whose reply
// was lost) costs promptness, and Sweep closes what RunDue missed.
func TestConformanceRedisFaults(t *testing.T) {
	r, rp := testenv.NewFaultyRedis(t)
	c := newConformance(t, testenv.NewSQLs(t, 2), r, rp)
	c.run([]fault{
		{"redis replies lost", c.flap(20*time.Millisecond, 20*time.Millisecond, func() { rp.DropReplies(2) })},
		{"redis connections reset", c.flap(30*time.Millisecond, 60*time.Millisecond, rp.Reset)},
	})
}

type fault struct {
	name string
	run  func(stop <-chan struct{}) // arms the fault, at once or until stop
}

func newConformance(t *testing.T, dbs []*sqlx.DB, r *testenv.Redis, p *testenv.Proxy) *conformance {
	clk := testenv.NewClock(start)
	s, err := order.New(r.Client, dbs, order.Config{TablesPerDB: 2, Namespace: r.Namespace, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &conformance{t: t, s: s, proxy: p, clk: clk}
}

// run sells one SKU per fault, with the fault armed.
func (c *conformance) run(faults []fault) {
	parent := c.t
	for _, f := range faults {
		parent.Run(f.name, func(t *testing.T) {
			c.t = t
			c.sale(strings.ReplaceAll(f.name, " ", "-"), f.run)
		})
	}
}

// flap arms a fault for on, heals for off, and again until stop.
func (c *conformance) flap(on, off time.Duration, arm func()) func(stop <-chan struct{}) {
	return func(stop <-chan struct{}) { c.proxy.Flap(stop, on, off, arm) }
}

const (
	saleStock  = 8
	saleBuyers = 12
	salePrice  = 1999
	accStock   = 100 // the accessory each buyer takes two of
	accPrice   = 350
)

// sale sells sku to more buyers than it has units while fault runs: each
// buyer retries its request until it has an answer, starts two payment
// attempts, every fourth cancels, and the gateway delivers both attempts'
// callbacks (twice each). A fifth of the buyers never pay, and are closed
// at their deadline by RunDue or, where Redis lost their entry, by Sweep.
// Each buyer whose order was paid ships it in two parcels with a line
// refund between them, every third returns sku afterwards, and the refunds
// are paid back — every request retried until it has an answer.
func (c *conformance) sale(sku string, fault func(stop <-chan struct{})) {
	t, ctx := c.t, context.Background()
	if err := c.s.PutSKU(ctx, sku, salePrice, saleStock); err != nil {
		t.Fatal(err)
	}
	if err := c.s.PutSKU(ctx, sku+"-acc", accPrice, accStock); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var faulting sync.WaitGroup
	faulting.Go(func() { fault(stop) })

	var mu sync.Mutex
	collected := map[int64]int64{} // order → fen the gateway collected for it
	var ids []int64
	var wg sync.WaitGroup
	for i := range saleBuyers {
		wg.Go(func() {
			o, err := c.buy(sku, i)
			if errors.Is(err, order.ErrOutOfStock) {
				return
			}
			if err != nil {
				t.Errorf("buyer %d: %v", i, err)
				return
			}
			mu.Lock()
			ids = append(ids, o.ID)
			mu.Unlock()
			if i%5 == 4 {
				return // never pays
			}
			got := c.payTwice(o, i%4 == 0)
			mu.Lock()
			collected[o.ID] = got
			mu.Unlock()
			c.fulfil(o, sku, i%3 == 0)
		})
	}
	wg.Wait()
	close(stop)
	faulting.Wait()
	c.proxy.Heal()
	if t.Failed() {
		return
	}

	// The unpaid orders time out: RunDue closes those the delay queue
	// holds, Sweep the ones whose entry a Redis fault lost.
	c.clk.Add(31 * time.Minute)
	if _, err := c.s.RunDue(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := c.s.Sweep(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	c.check(sku, ids, collected)
}

// retry runs op until it succeeds or fails for a reason of the block's,
// each attempt with its own deadline, as a client does.
func retry[T any](op func(ctx context.Context) (T, error), final ...error) (T, error) {
	deadline := testenv.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := op(ctx)
		cancel()
		if err == nil || testenv.Now().After(deadline) {
			return v, err
		}
		for _, f := range final {
			if errors.Is(err, f) {
				return v, err
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *conformance) buy(sku string, i int) (order.Order, error) {
	n := order.NewOrder{User: fmt.Sprintf("%s-u%d", sku, i), RequestID: "r1", Lines: []order.Line{{SKU: sku, Qty: 1}, {SKU: sku + "-acc", Qty: 2}}}
	return retry(func(ctx context.Context) (order.Order, error) { return c.s.Create(ctx, n) }, order.ErrOutOfStock)
}

// fulfil ships a paid order in two parcels — one accessory, then the rest —
// refunds the other accessory between them (it is cancelled: it never
// ships), returns sku afterwards if asked, and pays the refunds back.
func (c *conformance) fulfil(o order.Order, sku string, returns bool) {
	t := c.t
	o, err := retry(func(ctx context.Context) (order.Order, error) { return c.s.Get(ctx, o.ID) })
	if err != nil {
		t.Errorf("read %d: %v", o.ID, err)
		return
	}
	if o.Status != order.Paid {
		return
	}
	acc := []order.Line{{SKU: sku + "-acc", Qty: 1}}
	if _, err := retry(func(ctx context.Context) (order.Parcel, error) {
		p, _, err := c.s.ShipParcel(ctx, o.ID, order.NewParcel{RequestID: "parcel-1", Lines: acc})
		return p, err
	}); err != nil {
		t.Errorf("parcel of %d: %v", o.ID, err)
		return
	}
	refund := func(lines []order.Line, req string) {
		r, err := retry(func(ctx context.Context) (order.Refund, error) {
			return c.s.RefundLines(ctx, o.ID, lines, "return", req)
		})
		if err != nil {
			t.Errorf("line refund %s of %d: %v", req, o.ID, err)
			return
		}
		if _, err := retry(func(ctx context.Context) (order.Refund, error) { return c.s.RefundPaid(ctx, r.RefundNo) }); err != nil {
			t.Errorf("pay back refund %d: %v", r.RefundNo, err)
		}
	}
	refund(acc, "cancel-acc")
	if _, err := retry(func(ctx context.Context) (order.Order, error) { return c.s.Ship(ctx, o.ID) }); err != nil {
		t.Errorf("ship the rest of %d: %v", o.ID, err)
	}
	if returns {
		refund([]order.Line{{SKU: sku, Qty: 1}}, "return-main")
	}
}

// payTwice starts two payment attempts for o (each request retried by its
// id until it has an answer), cancels it first if asked, and delivers both
// callbacks twice; it returns what the gateway collected.
func (c *conformance) payTwice(o order.Order, cancel bool) int64 {
	t := c.t
	var pays []order.Payment
	for _, ch := range []string{"wechat", "alipay"} {
		p, err := retry(func(ctx context.Context) (order.Payment, error) {
			return c.s.StartPaymentRequest(ctx, o.ID, ch, "pay-"+ch)
		})
		if err != nil {
			t.Errorf("start payment of %d: %v", o.ID, err)
			return 0
		}
		pays = append(pays, p)
	}
	if cancel {
		if _, err := retry(func(ctx context.Context) (order.Order, error) {
			return c.s.CancelOrder(ctx, o.ID, order.ReasonUserCancel)
		}); err != nil {
			t.Errorf("cancel %d: %v", o.ID, err)
		}
	}
	for range 2 { // the gateway redelivers
		for _, p := range pays {
			cb := order.Callback{PayNo: p.PayNo, GatewayTxn: fmt.Sprint("txn-", p.PayNo), Amount: p.Amount, Currency: p.Currency, Success: true, PaidAt: c.clk.Now()}
			if _, err := retry(func(ctx context.Context) (order.Outcome, error) { return c.s.HandleCallback(ctx, cb) }); err != nil {
				t.Errorf("callback of %d: %v", p.PayNo, err)
			}
		}
	}
	return pays[0].Amount + pays[1].Amount
}

// check asserts the invariants on sku's stock, its accessory's, and on
// orders ids.
func (c *conformance) check(sku string, ids []int64, collected map[int64]int64) {
	t, ctx := c.t, context.Background()
	st, err := c.s.StockOf(ctx, sku)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := c.s.StockOf(ctx, sku+"-acc")
	if err != nil {
		t.Fatal(err)
	}
	if st.Available < 0 || st.Locked != 0 || st.Available+st.Locked+st.Sold != saleStock {
		t.Errorf("stock %+v: want available + sold = %d and nothing locked", st, saleStock)
	}
	if acc.Locked != 0 || acc.Available+acc.Sold != accStock {
		t.Errorf("accessory stock %+v: want available + sold = %d and nothing locked", acc, accStock)
	}
	orders, err := c.s.GetMany(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	var paid, kept, refunded, took, keptUnits, keptAcc int64
	for _, id := range ids {
		o := orders[id]
		refunds, err := c.s.Refunds(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		byPayment := map[int64]bool{}
		var strays, byLine int64
		for _, r := range refunds {
			if r.Lines != nil { // the order's own, by line
				byLine += r.Amount
				if r.Status != order.RefundDone || r.PayNo != o.PayNo {
					t.Errorf("order %d: line refund %+v", id, r)
				}
				continue
			}
			if byPayment[r.PayNo] || r.PayNo == o.PayNo && o.PayNo != 0 {
				t.Errorf("order %d: payment %d refunded twice or refunded and kept", id, r.PayNo)
			}
			byPayment[r.PayNo] = true
			refunded += r.Amount
			strays++
		}
		switch {
		case o.PayNo != 0:
			paid++
			kept += o.Amount
			main, accessory := o.Items[0], o.Items[1]
			keptUnits += main.Qty - main.Refunded
			keptAcc += accessory.Qty - accessory.Refunded
			if strays != 1 {
				t.Errorf("paid order %d: %d refunds of payments, want 1 (its second attempt)", id, strays)
			}
			if o.Status != order.Shipped || accessory.Shipped != 1 || accessory.Refunded != 1 || main.Shipped != 1 ||
				byLine != o.Refunded || byLine != accPrice+main.Refunded*salePrice {
				t.Errorf("paid order %d after its parcels and line refunds: %+v, %d refunded by line", id, o, byLine)
			}
			if ps, err := c.s.Parcels(ctx, id); err != nil || len(ps) != 2 {
				t.Errorf("paid order %d: parcels %+v, %v; want 2", id, ps, err)
			}
		case o.Status == order.Closed && len(refunds) != 0 && len(refunds) != 2:
			t.Errorf("closed order %d: %d refunds, want both attempts or none", id, len(refunds))
		case o.Status != order.Closed:
			t.Errorf("order %d is %s after every buyer finished and the deadline passed", id, o.Status)
		}
		if !o.Settled {
			t.Errorf("order %d (%s): stock never settled", id, o.Status)
		}
		took += collected[id]
	}
	if paid == 0 {
		t.Errorf("no order was paid: parcels and line refunds untried")
	}
	if st.Sold != keptUnits || acc.Sold != keptAcc || keptAcc != paid {
		t.Errorf("%d and %d units sold; %d orders paid keep %d and %d", st.Sold, acc.Sold, paid, keptUnits, keptAcc)
	}
	if took != kept+refunded {
		t.Errorf("the gateway collected %d fen; orders kept %d and %d were refunded (difference %d)", took, kept, refunded, took-kept-refunded)
	}
}

// A reservation whose transaction cannot even begin (its connection died
// at BEGIN) fails the Create with an error a repeat finishes; it used to
// panic on a nil map.
func TestReserveBeginFails(t *testing.T) {
	ctx := context.Background()
	f := testenv.NewFaultySQL(t, 1)
	r := testenv.NewRedis(t)
	s, err := order.New(r.Client, f.DBs, order.Config{TablesPerDB: 2, Namespace: r.Namespace, Now: testenv.NewClock(start).Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSKU(ctx, "s", 100, 5); err != nil {
		t.Fatal(err)
	}
	n := order.NewOrder{User: "u", RequestID: "r", Lines: []order.Line{{SKU: "s", Qty: 1}}}
	if _, err := s.Create(ctx, order.NewOrder{User: "warm", RequestID: "r", Lines: n.Lines}); err != nil {
		t.Fatal(err) // leases the order numbers, so the next transactions are Create's own
	}
	f.DropReplyTo("START TRANSACTION", 2) // 1: insert the order, 2: reserve its stock
	if _, err := s.Create(ctx, n); err == nil || f.Cuts() != 1 {
		t.Fatalf("Create whose reservation could not begin: %v, %d cuts", err, f.Cuts())
	}
	o, err := s.Create(ctx, n)
	if err != nil || !o.Reserved {
		t.Fatalf("the repeat: %+v, %v", o, err)
	}
	if st, err := s.StockOf(ctx, "s"); err != nil || st.Available != 3 || st.Locked != 2 {
		t.Fatalf("stock %+v, %v; want 3 available, 2 locked", st, err)
	}
}
