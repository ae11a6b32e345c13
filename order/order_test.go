package order_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var start = testenv.Now().UTC().Truncate(time.Hour)

type fixture struct {
	t   testing.TB
	s   *order.Service
	dbs []*sqlx.DB
	clk *testenv.Clock
	r   *testenv.Redis
}

// setup gives a service on 8 databases (MariaDB when CASEBOOK_MYSQL_DSN is
// set, else SQLite files) with cfg.TablesPerDB tables each: the seed's
// 8 × 8 when asked, 8 × 2 by default to keep table creation short.
func setup(t *testing.T, cfg order.Config) *fixture { return setupTB(t, cfg) }

// setupB is the seed's layout, 8 databases × 8 tables, for benchmarks.
func setupB(b *testing.B) *fixture { return setupTB(b, order.Config{TablesPerDB: 8}) }

func setupTB(t testing.TB, cfg order.Config) *fixture { return setupOn(t, testenv.NewRedis(t), cfg) }

// setupOn is setup on r (a single Redis or a cluster).
func setupOn(t testing.TB, r *testenv.Redis, cfg order.Config) *fixture {
	t.Helper()
	dbs := testenv.NewSQLs(t, 8)
	if cfg.TablesPerDB == 0 {
		cfg.TablesPerDB = 2
	}
	clk := testenv.NewClock(start)
	cfg.Namespace, cfg.Now = r.Namespace, clk.Now
	s, err := order.New(r.Client, dbs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, s: s, dbs: dbs, clk: clk, r: r}
}

func (f *fixture) sku(name string, price, units int64) {
	f.t.Helper()
	if err := f.s.PutSKU(context.Background(), name, price, units); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) create(user, req string, lines ...order.Line) order.Order {
	f.t.Helper()
	o, err := f.s.Create(context.Background(), order.NewOrder{User: user, RequestID: req, Lines: lines})
	if err != nil {
		f.t.Fatalf("create %s/%s: %v", user, req, err)
	}
	return o
}

// pay starts a payment for o and delivers its successful callback.
func (f *fixture) pay(o order.Order, txn string) (order.Payment, order.Outcome) {
	f.t.Helper()
	p, err := f.s.StartPayment(context.Background(), o.ID, "wechat")
	if err != nil {
		f.t.Fatalf("start payment of %d: %v", o.ID, err)
	}
	out, err := f.s.HandleCallback(context.Background(), order.Callback{PayNo: p.PayNo, GatewayTxn: txn, Amount: p.Amount, Currency: p.Currency, Success: true, PaidAt: f.clk.Now()})
	if err != nil {
		f.t.Fatalf("callback %s: %v", txn, err)
	}
	return p, out
}

func (f *fixture) stock(sku string) order.Stock {
	f.t.Helper()
	st, err := f.s.StockOf(context.Background(), sku)
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

func (f *fixture) get(id int64) order.Order {
	f.t.Helper()
	o, err := f.s.Get(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return o
}

// A whole life: create at the server's price, pay, ship, complete; the
// stock moves available → locked → sold.
func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{TablesPerDB: 8})
	f.sku("phone", 399900, 10)
	f.sku("case", 4900, 10)
	o := f.create("u1", "r1", order.Line{SKU: "phone", Qty: 1}, order.Line{SKU: "case", Qty: 2})
	if o.Status != order.Pending || !o.Reserved || o.Amount != 399900+2*4900 || o.Currency != "CNY" {
		t.Fatalf("created %+v", o)
	}
	if st := f.stock("case"); st.Available != 8 || st.Locked != 2 || st.Sold != 0 {
		t.Fatalf("case stock after create: %+v", st)
	}
	if got := f.get(o.ID); got.ID != o.ID || got.User != "u1" || len(got.Items) != 2 {
		t.Fatalf("Get = %+v", got)
	}
	if _, out := f.pay(o, "wx-1"); out != order.OutcomePaid {
		t.Fatalf("pay: %s", out)
	}
	if st := f.stock("case"); st.Available != 8 || st.Locked != 0 || st.Sold != 2 {
		t.Fatalf("case stock after pay: %+v", st)
	}
	if _, err := f.s.Ship(ctx, o.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := f.s.Complete(ctx, o.ID); err != nil || got.Status != order.Completed {
		t.Fatalf("complete: %+v %v", got, err)
	}
	list, next, err := f.s.UserOrders(ctx, "u1", "", 10)
	if err != nil || len(list) != 1 || next != "" || list[0].Status != order.Completed {
		t.Fatalf("UserOrders = %v %q %v", list, next, err)
	}
}

// Every transition outside the table is refused with ErrIllegalTransition
// and changes nothing.
func TestIllegalTransitionsRefused(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("s", 100, 100)
	n := 0
	make := func(to order.Status) order.Order {
		n++
		o := f.create("u", fmt.Sprint("r", n), order.Line{SKU: "s", Qty: 2})
		switch to {
		case order.Closed:
			o, _ = f.s.CancelOrder(ctx, o.ID, order.ReasonUserCancel)
		case order.Paid, order.PartiallyShipped, order.Shipped, order.Completed, order.Refunding, order.Refunded:
			f.pay(o, fmt.Sprint("tx", n))
		}
		if to == order.PartiallyShipped {
			f.s.ShipParcel(ctx, o.ID, order.NewParcel{RequestID: "p", Lines: []order.Line{{SKU: "s", Qty: 1}}})
		}
		if to == order.Shipped || to == order.Completed {
			f.s.Ship(ctx, o.ID)
		}
		if to == order.Completed {
			f.s.Complete(ctx, o.ID)
		}
		if to == order.Refunding || to == order.Refunded {
			r, _ := f.s.RequestRefund(ctx, o.ID, o.Amount, "return", fmt.Sprint("rr", n))
			if to == order.Refunded {
				f.s.RefundPaid(ctx, r.RefundNo)
			}
		}
		o = f.get(o.ID)
		if o.Status != to {
			t.Fatalf("could not drive an order to %s: it is %s", to, o.Status)
		}
		return o
	}
	ops := map[order.Status]func(o order.Order) error{
		order.Closed:  func(o order.Order) error { _, err := f.s.CancelOrder(ctx, o.ID, order.ReasonUserCancel); return err },
		order.Shipped: func(o order.Order) error { _, err := f.s.Ship(ctx, o.ID); return err },
		order.PartiallyShipped: func(o order.Order) error {
			_, _, err := f.s.ShipParcel(ctx, o.ID, order.NewParcel{RequestID: "another", Lines: []order.Line{{SKU: "s", Qty: 1}}})
			return err
		},
		order.Completed: func(o order.Order) error { _, err := f.s.Complete(ctx, o.ID); return err },
		order.Refunding: func(o order.Order) error { _, err := f.s.RequestRefund(ctx, o.ID, 1, "x", "again"); return err },
		order.Paid: func(o order.Order) error {
			_, err := f.s.StartPayment(ctx, o.ID, "alipay")
			return err
		},
	}
	all := []order.Status{order.Pending, order.Paid, order.PartiallyShipped, order.Shipped, order.Completed, order.Closed, order.Refunding, order.Refunded}
	for _, from := range all {
		for to, op := range ops {
			if order.CanTransition(from, to) || from == to {
				continue
			}
			o := make(from)
			if err := op(o); !errors.Is(err, order.ErrIllegalTransition) {
				t.Errorf("%s → %s: %v, want ErrIllegalTransition", from, to, err)
			}
			if after := f.get(o.ID); after.Status != o.Status || after.Version != o.Version {
				t.Errorf("%s → %s refused but the order changed: v%d %s → v%d %s", from, to, o.Version, o.Status, after.Version, after.Status)
			}
		}
	}
	if order.StateTable() == "" || !order.CanTransition(order.Pending, order.Paid) || order.CanTransition(order.Closed, order.Paid) {
		t.Fatal("state table")
	}
	// No operation returns an order to Pending, only RefundPaid of a
	// requested refund makes one Refunded (from Refunding, where refunds of
	// all that is left put it), and a partly shipped order never goes back
	// to Paid: the table must agree.
	for _, from := range all {
		if order.CanTransition(from, order.Pending) {
			t.Errorf("the table lets %s go back to pending", from)
		}
		if order.CanTransition(from, order.Refunded) != (from == order.Refunding) {
			t.Errorf("the table says %s → refunded is %v", from, order.CanTransition(from, order.Refunded))
		}
		if order.CanTransition(order.PartiallyShipped, from) && from != order.Shipped && from != order.Refunding {
			t.Errorf("the table lets a partly shipped order become %s", from)
		}
	}
}

// 1,000 buyers race for 100 units: exactly 100 orders hold stock, the rest
// are closed out of stock, and available + locked + sold = 100 whenever it
// is looked at.
func TestConcurrentOrdersNoOversell(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{TablesPerDB: 8})
	f.sku("hot", 999, 100)
	stop := make(chan struct{})
	var bad atomic.Int64
	var watcher sync.WaitGroup
	watcher.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if st := f.stock("hot"); st.Available+st.Locked+st.Sold != 100 || st.Available < 0 {
				bad.Add(1)
			}
		}
	})
	var won, short atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range 1000 {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := f.s.Create(ctx, order.NewOrder{User: fmt.Sprint("buyer", i), RequestID: "sale", Lines: []order.Line{{SKU: "hot", Qty: 1}}})
			switch {
			case err == nil:
				won.Add(1)
			case errors.Is(err, order.ErrOutOfStock):
				short.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	close(stop)
	watcher.Wait()
	st := f.stock("hot")
	if won.Load() != 100 || short.Load() != 900 || st.Available != 0 || st.Locked != 100 || bad.Load() != 0 {
		t.Fatalf("won %d, short %d, stock %+v, %d bad samples", won.Load(), short.Load(), st, bad.Load())
	}
}

// A repeated request — sequential or 20 at once — returns the one order and
// reserves once.
func TestCreateIsIdempotent(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("s", 500, 50)
	ids := make([]int64, 20)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			o, err := f.s.Create(ctx, order.NewOrder{User: "u", RequestID: "click-1", Lines: []order.Line{{SKU: "s", Qty: 3}}})
			if err != nil {
				t.Error(err)
			}
			ids[i] = o.ID
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("one request made orders %v", ids)
		}
	}
	if st := f.stock("s"); st.Locked != 3 || st.Available != 47 {
		t.Fatalf("stock %+v, want 3 locked once", st)
	}
	if list, _, _ := f.s.UserOrders(ctx, "u", "", 10); len(list) != 1 {
		t.Fatalf("%d orders for one request", len(list))
	}
}

// The three TCC anomalies, explicitly: repeats of each step, a cancel before
// its try (null compensation), a try after its cancel (hanging).
func TestReservationAnomalies(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("s", 100, 10)
	check := func(avail, locked, sold int64) {
		t.Helper()
		if st := f.stock("s"); st.Available != avail || st.Locked != locked || st.Sold != sold {
			t.Fatalf("stock %+v, want %d/%d/%d", st, avail, locked, sold)
		}
	}
	for range 3 { // duplicate try
		if err := f.s.Reserve(ctx, 1, "s", 2); err != nil {
			t.Fatal(err)
		}
	}
	check(8, 2, 0)
	for range 3 { // duplicate confirm
		if err := f.s.Confirm(ctx, 1, "s"); err != nil {
			t.Fatal(err)
		}
	}
	check(8, 0, 2)
	if err := f.s.Cancel(ctx, 1, "s"); !errors.Is(err, order.ErrIllegalTransition) {
		t.Fatalf("cancel after confirm: %v", err)
	}
	f.s.Reserve(ctx, 2, "s", 3)
	for range 3 { // duplicate cancel
		if err := f.s.Cancel(ctx, 2, "s"); err != nil {
			t.Fatal(err)
		}
	}
	check(8, 0, 2)
	// Null compensation: the cancel arrives first and changes no stock…
	if err := f.s.Cancel(ctx, 3, "s"); err != nil {
		t.Fatal(err)
	}
	check(8, 0, 2)
	// …and the try that arrives after it hangs: refused.
	if err := f.s.Reserve(ctx, 3, "s", 1); !errors.Is(err, order.ErrHanging) {
		t.Fatalf("try after cancel: %v, want ErrHanging", err)
	}
	if err := f.s.Confirm(ctx, 3, "s"); !errors.Is(err, order.ErrIllegalTransition) {
		t.Fatalf("confirm of a cancelled reservation: %v", err)
	}
	if err := f.s.Confirm(ctx, 4, "s"); !errors.Is(err, order.ErrIllegalTransition) {
		t.Fatalf("confirm of no reservation: %v", err)
	}
	if err := f.s.Reserve(ctx, 5, "s", 9); !errors.Is(err, order.ErrOutOfStock) {
		t.Fatalf("over-reserve: %v", err)
	}
	if err := f.s.Reserve(ctx, 6, "nope", 1); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("unknown sku: %v", err)
	}
	check(8, 0, 2)
	// Races of cancel and try on one reservation: whichever wins, stock is
	// whole and the loser changes nothing.
	for i := range 50 {
		id := int64(100 + i)
		var wg sync.WaitGroup
		wg.Go(func() { f.s.Reserve(ctx, id, "s", 1) })
		wg.Go(func() { f.s.Cancel(ctx, id, "s") })
		wg.Wait()
		f.s.Cancel(ctx, id, "s")
	}
	check(8, 0, 2)
}

// Batches race for a hot SKU: each order all-or-nothing, exactly the stock
// sold, repeats inside and across batches made once, bad requests refused
// alone.
func TestCreateBatch(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("hot", 100, 300)
	f.sku("side", 5, 1_000_000)
	var won, short atomic.Int64
	var wg sync.WaitGroup
	for b := range 30 {
		wg.Go(func() {
			var reqs []order.NewOrder
			for i := range 20 {
				u := fmt.Sprintf("u%d", (b*20+i)%500) // users repeat across batches
				reqs = append(reqs, order.NewOrder{User: u, RequestID: "sale", Lines: []order.Line{{SKU: "side", Qty: 1}, {SKU: "hot", Qty: 1}}})
			}
			reqs = append(reqs, reqs[0], order.NewOrder{User: "bad user", RequestID: "x", Lines: []order.Line{{SKU: "hot", Qty: 1}}})
			res := f.s.CreateBatch(ctx, reqs)
			if !errors.Is(res[len(res)-1].Err, order.ErrInvalid) {
				t.Errorf("bad request: %v", res[len(res)-1].Err)
			}
			if res[0].Order.ID != res[20].Order.ID {
				t.Errorf("a request twice in one batch made %d and %d", res[0].Order.ID, res[20].Order.ID)
			}
			for _, r := range res[:20] {
				switch {
				case r.Err == nil && r.Order.Reserved:
					won.Add(1)
				case errors.Is(r.Err, order.ErrOutOfStock) && r.Order.Status == order.Closed:
					short.Add(1)
				default:
					t.Errorf("%+v", r)
				}
			}
		})
	}
	wg.Wait()
	hot, side := f.stock("hot"), f.stock("side")
	// 500 distinct users: the 100 repeated ones count once each.
	if hot.Locked != 300 || hot.Available != 0 || side.Locked != 300 || side.Available != 1_000_000-300 {
		t.Fatalf("hot %+v, side %+v: want 300 locked of each (all-or-nothing per order)", hot, side)
	}
	if won.Load() < 300 || short.Load() == 0 {
		t.Fatalf("won %d (repeats included), short %d", won.Load(), short.Load())
	}
}

// Each step an order has taken, repeated, returns it unchanged (a retry
// after a lost reply); a step from any other status is ErrIllegalTransition
// and changes nothing.
func TestRepeatedStepsAreIdempotent(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("pen", 150, 10)
	o := f.create("ann", "r1", order.Line{SKU: "pen", Qty: 1})
	if _, err := f.s.Ship(ctx, o.ID); !errors.Is(err, order.ErrIllegalTransition) {
		t.Fatalf("ship a pending order: %v", err)
	}
	if _, err := f.s.Complete(ctx, o.ID); !errors.Is(err, order.ErrIllegalTransition) {
		t.Fatalf("complete a pending order: %v", err)
	}
	f.pay(o, "tx1")
	if _, err := f.s.Complete(ctx, o.ID); !errors.Is(err, order.ErrIllegalTransition) {
		t.Fatalf("complete a paid order: %v", err)
	}
	shipped, err := f.s.Ship(ctx, o.ID)
	if err != nil || shipped.Status != order.Shipped {
		t.Fatalf("ship: %+v %v", shipped, err)
	}
	f.clk.Add(time.Minute)
	again, err := f.s.Ship(ctx, o.ID)
	if err != nil || again.Version != shipped.Version || !again.ShippedAt.Equal(shipped.ShippedAt) {
		t.Fatalf("ship again: %+v %v; want %+v unchanged", again, err, shipped)
	}
	done, err := f.s.Complete(ctx, o.ID)
	if err != nil || done.Status != order.Completed {
		t.Fatalf("complete: %+v %v", done, err)
	}
	if again, err := f.s.Complete(ctx, o.ID); err != nil || again.Version != done.Version {
		t.Fatalf("complete again: %+v %v; want %+v unchanged", again, err, done)
	}
	if _, err := f.s.Ship(ctx, o.ID); !errors.Is(err, order.ErrIllegalTransition) {
		t.Fatalf("ship a completed order: %v", err)
	}
	if got := f.get(o.ID); got.Version != done.Version || got.Status != order.Completed {
		t.Fatalf("after the refused steps: %+v", got)
	}
}
