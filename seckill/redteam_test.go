package seckill_test

// Red-team tests: each one attacks a guarantee the package documentation
// makes, through the public API only, and checks the invariants that must
// hold once everything has settled.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/seckill"
)

// orderEvents relays the order block's outbox and returns the events.
func (f *fixture) orderEvents(ctx context.Context) [][]byte {
	f.t.Helper()
	c := &collect{}
	if _, err := f.orders.RelayOutbox(ctx, c, "order-events", 10_000); err != nil {
		f.t.Fatal(err)
	}
	return c.values
}

// handleEvents hands every event to HandleOrderEvent, trying a transient
// error again after a Sweep (the order block settling a close).
func (f *fixture) handleEvents(ctx context.Context, values [][]byte) error {
	for _, v := range values {
		var err error
		for try := 0; try < 20; try++ {
			if err = f.s.HandleOrderEvent(ctx, nil, v); err == nil || errors.Is(err, outbox.ErrPoison) {
				break
			}
			if _, serr := f.orders.Sweep(ctx, 1000); serr != nil {
				return serr
			}
		}
		if err != nil {
			return fmt.Errorf("event %s: %w", v, err)
		}
	}
	return nil
}

// settle lets everything run to its end: the order events are consumed and
// the due reservations released, until a pass finds nothing more to do.
func (f *fixture) settle(ctx context.Context) {
	f.t.Helper()
	for range 5 {
		if _, err := f.orders.Sweep(ctx, 1000); err != nil {
			f.t.Fatal(err)
		}
		evs := f.orderEvents(ctx)
		if err := f.handleEvents(ctx, evs); err != nil {
			f.t.Fatal(err)
		}
		n, err := f.sl.ReleaseDue(ctx)
		if err != nil {
			f.t.Fatal(err)
		}
		if n == 0 && len(evs) == 0 {
			return
		}
	}
}

// balanced asserts the gate and the record agree once settled: Redis stock =
// SQL's available units, every unit is available, pending or paid, one open
// reservation per pending order, and Reconcile finds nothing.
func (f *fixture) balanced(ctx context.Context, initial int64) map[string]int64 {
	f.t.Helper()
	orders, stock := f.sqlCounts(ctx)
	left, err := f.sl.RedisStock(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	if left != stock || stock+orders[statePending]+orders[statePaid] != initial {
		f.t.Fatalf("Redis stock %d, SQL available %d, orders %v; want Redis = SQL and available+pending+paid = %d", left, stock, orders, initial)
	}
	pending := int64(0)
	for _, o := range f.allOrders(ctx) {
		if state(o) == statePending {
			pending++
		}
	}
	if open := f.open(ctx); open != pending {
		f.t.Fatalf("%d reservations open in Redis, %d pending orders", open, pending)
	}
	if rep, err := f.sl.Reconcile(ctx, false); err != nil || !rep.OK() {
		f.t.Fatalf("reconcile: %+v, %v", rep, err)
	}
	return orders
}

// buyOnceMore asserts that user may buy exactly `want` more units of one:
// several concurrent attempts, exactly want succeed and the rest hit the limit.
func (f *fixture) buyOnceMore(ctx context.Context, user string, want int) []string {
	f.t.Helper()
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			id, err := f.sl.Buy(ctx, user, 1)
			switch {
			case err == nil:
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			case errors.Is(err, seckill.ErrLimitReached):
			default:
				f.t.Errorf("%s buys again: %v", user, err)
			}
		})
	}
	wg.Wait()
	if len(ids) != want {
		f.t.Fatalf("%s bought %d more, want %d", user, len(ids), want)
	}
	return ids
}

// A payment callback, order.Expire, ReleaseDue and HandleOrderEvent all race
// for the same lapsed reservations: each order ends paid or released, never
// both; units and quotas come back exactly once.
func TestRedTeamPayRacesExpireReleaseAndEvents(t *testing.T) {
	ctx := context.Background()
	const n = 60
	f := setup(t, testenv.NewRedis(t), n, 1, 3, seckill.Config{})
	ids := make([]string, n)
	user := func(i int) string { return fmt.Sprintf("r%d", i) }
	for i := range ids {
		id, err := f.sl.Buy(ctx, user(i), 1)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	f.record(ctx)
	f.clk.Add(16 * time.Minute)
	var paid, refused atomic.Int64
	var stop atomic.Bool
	var wg, bg sync.WaitGroup
	bg.Go(func() { // an event consumer running beside everything
		for !stop.Load() {
			if err := f.handleEvents(ctx, f.orderEvents(ctx)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 2 {
		wg.Go(func() {
			for range 3 {
				if _, err := f.sl.ReleaseDue(ctx); err != nil {
					t.Errorf("release pass: %v", err)
				}
			}
		})
	}
	for i, id := range ids {
		o, err := f.s.OrderOf(ctx, user(i), id)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if _, err := f.orders.Expire(ctx, o.ID); err != nil && !errors.Is(err, order.ErrIllegalTransition) {
				t.Errorf("expire %d: %v", o.ID, err)
			}
		})
		wg.Go(func() {
			switch err := f.pay(ctx, user(i), id); {
			case err == nil:
				paid.Add(1)
			case errors.Is(err, errRefused):
				refused.Add(1)
			default:
				t.Errorf("pay %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	bg.Wait()
	f.settle(ctx)
	orders := f.balanced(ctx, n)
	if paid.Load()+refused.Load() != n || orders[statePaid] != paid.Load() || orders[stateReleased] != refused.Load() || orders[statePending] != 0 {
		t.Fatalf("paid %d, refused %d; SQL %v", paid.Load(), refused.Load(), orders)
	}
	t.Logf("paid %d, released %d", paid.Load(), refused.Load())
	for i := range n { // released buyers get their quota back once; payers none
		o, _ := f.s.OrderOf(ctx, user(i), ids[i])
		want := 0
		if o.Status == order.Closed {
			want = 1
		}
		f.buyOnceMore(ctx, user(i), want)
	}
}

// Orders cancelled after their deadline but before any release: the cancel's
// events (delivered twice) race two ReleaseDue passes. Each unit and quota
// comes back once.
func TestRedTeamCancelEventRacesRelease(t *testing.T) {
	ctx := context.Background()
	const n = 40
	f := setup(t, testenv.NewRedisCluster(t), n, 1, 4, seckill.Config{})
	ids := make([]string, n)
	user := func(i int) string { return fmt.Sprintf("c%d", i) }
	for i := range ids {
		id, err := f.sl.Buy(ctx, user(i), 1)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	f.record(ctx)
	f.clk.Add(16 * time.Minute)
	for i, id := range ids {
		o, err := f.s.OrderOf(ctx, user(i), id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.orders.CancelOrder(ctx, o.ID, order.ReasonUserCancel); err != nil {
			t.Fatal(err)
		}
	}
	evs := f.orderEvents(ctx)
	var released atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := f.handleEvents(ctx, evs); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			k, err := f.sl.ReleaseDue(ctx)
			if err != nil {
				t.Error(err)
			}
			released.Add(int64(k))
		})
	}
	wg.Wait()
	f.settle(ctx)
	orders := f.balanced(ctx, n)
	if orders[stateReleased] != n {
		t.Fatalf("SQL %v, want %d released", orders, n)
	}
	if left, _ := f.sl.RedisStock(ctx); left != n {
		t.Fatalf("Redis stock %d, want %d", left, n)
	}
	for i := range n {
		f.buyOnceMore(ctx, user(i), 1)
	}
	if left, _ := f.sl.RedisStock(ctx); left != 0 {
		t.Fatalf("Redis stock %d after every buyer bought once more, want 0", left)
	}
}

// Every order message redelivered four times, concurrently and out of order,
// while release passes settle the half of the reservations that lapsed: one
// order per reservation, the lapsed ones released, the others pending.
func TestRedTeamRedeliveryStormWithReleases(t *testing.T) {
	ctx := context.Background()
	const n = 80
	f := setup(t, testenv.NewRedis(t), n, 1, 4, seckill.Config{})
	lapsed := map[string]bool{}
	for i := range n {
		if i == n/2 {
			f.clk.Add(10 * time.Minute)
		}
		id, err := f.sl.Buy(ctx, fmt.Sprintf("d%d", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		lapsed[id] = i < n/2
	}
	values := f.drain(ctx)
	f.clk.Add(6 * time.Minute)
	var wg sync.WaitGroup
	for range 4 {
		shuffled := append([][]byte(nil), values...)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		wg.Go(func() {
			for _, v := range shuffled {
				if err := f.s.HandleOrder(ctx, nil, v); err != nil {
					t.Errorf("HandleOrder: %v", err)
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for range 3 {
				if _, err := f.sl.ReleaseDue(ctx); err != nil {
					t.Errorf("release pass: %v", err)
				}
			}
		})
	}
	wg.Wait()
	f.settle(ctx)
	byID := map[string]int{}
	for _, o := range f.allOrders(ctx) {
		byID[o.RequestID]++
		want := statePending
		if lapsed[o.RequestID] {
			want = stateReleased
		}
		if got := state(o); got != want {
			t.Errorf("order of %s (lapsed %v) is %s, want %s", o.RequestID, lapsed[o.RequestID], got, want)
		}
	}
	for id := range lapsed {
		if byID[id] != 1 {
			t.Errorf("reservation %s has %d orders", id, byID[id])
		}
	}
	if len(byID) != n {
		t.Fatalf("%d reservations have orders, want %d", len(byID), n)
	}
	orders := f.balanced(ctx, n)
	if orders[stateReleased] != n/2 || orders[statePending] != n/2 {
		t.Fatalf("SQL %v, want %d released and %d pending", orders, n/2, n/2)
	}
}

// A release pass that read a reservation open, found no order for it, and
// then lost the race to a pass that closed the batch's last slot (taking its
// deadline along) leaves it to that pass: nothing restocked twice, no error.
// The storm above hits this interleaving only now and then.
func TestReleaseAfterAConcurrentClose(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 2, 1, 1, seckill.Config{})
	id, err := f.sl.Buy(ctx, "u1", 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.sl.Reservation(ctx, id)
	if err != nil || res == "" {
		t.Fatalf("reservation %s reads %q, %v", id, res, err)
	}
	f.clk.Add(16 * time.Minute)
	if restocked, err := f.sl.Close(ctx, id, true); err != nil || !restocked {
		t.Fatalf("the other pass's close: restocked %v, %v", restocked, err)
	}
	restocked, err := f.sl.SettleRead(ctx, id, res)
	if err != nil || restocked {
		t.Fatalf("the late pass: restocked %v, %v; want false, nil", restocked, err)
	}
	if left, _ := f.sl.RedisStock(ctx); left != 2 {
		t.Fatalf("Redis stock %d, want 2", left)
	}
}

// A user at its limit whose order is cancelled may buy again exactly once,
// as many times as this happens; once the rest is paid, the deadline passing
// gives nothing back.
func TestRedTeamQuotaBackOnceAfterCancel(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedisCluster(t), 10, 2, 3, seckill.Config{})
	held := f.buyOnceMore(ctx, "q", 2)
	f.record(ctx)
	for round := range 3 {
		o, err := f.s.OrderOf(ctx, "q", held[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.orders.CancelOrder(ctx, o.ID, order.ReasonUserCancel); err != nil {
			t.Fatal(err)
		}
		evs := f.orderEvents(ctx)
		for range 3 { // replays change nothing
			if err := f.handleEvents(ctx, evs); err != nil {
				t.Fatal(err)
			}
		}
		if left, _ := f.sl.RedisStock(ctx); left != 9 {
			t.Fatalf("round %d: Redis stock %d after the cancel, want 9", round, left)
		}
		again := f.buyOnceMore(ctx, "q", 1)
		held = append(held[1:], again[0])
		f.record(ctx)
	}
	for _, id := range held {
		if err := f.pay(ctx, "q", id); err != nil {
			t.Fatal(err)
		}
	}
	f.clk.Add(16 * time.Minute)
	f.settle(ctx)
	f.buyOnceMore(ctx, "q", 0)
	orders := f.balanced(ctx, 10)
	if orders[statePaid] != 2 || orders[stateReleased] != 3 {
		t.Fatalf("SQL %v, want 2 paid and 3 released", orders)
	}
}

// statusEvent forges an order event as the order block writes it.
func statusEvent(o order.Order, from, to order.Status, version int64) []byte {
	return fmt.Appendf(nil, `{"v":1,"id":"o%d-v%d","kind":"status","order":%d,"user":%q,"from":%q,"to":%q,"version":%d,"amount":%d,"at":1}`,
		o.ID, version, o.ID, o.User, from, to, version, o.Amount)
}

// Events of orders the campaign did not make, of another campaign, replays,
// a stale or forged close of a pending order, events of unknown orders and
// malformed ones: none changes campaign c1's stock or quotas, and another
// campaign's cancel restocks that campaign only.
func TestRedTeamForeignAndForgedEvents(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 5, 1, 1, seckill.Config{})
	other, err := f.s.Create(ctx, seckill.Campaign{ID: "c2", SKU: "sku-2", Price: 50, Stock: 5, Limit: 1, Buckets: 1, Starts: saleStart, Ends: saleStart.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	id1, err := f.sl.Buy(ctx, "u", 1)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := other.Buy(ctx, "u", 1)
	if err != nil {
		t.Fatal(err)
	}
	f.record(ctx)
	c := &collect{}
	if _, err := outbox.NewRelay(f.r.Client, other.Outboxes(), "orders", c).DrainAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, v := range c.values {
		if err := f.s.HandleOrder(ctx, nil, v); err != nil {
			t.Fatal(err)
		}
	}
	mine, err := f.s.OrderOf(ctx, "u", id1)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := f.s.OrderOf(ctx, "u", id2)
	if err != nil {
		t.Fatal(err)
	}
	// A shop order of the same user, unrelated to any campaign, closed.
	if err := f.orders.PutSKU(ctx, "shop", 10, 100); err != nil {
		t.Fatal(err)
	}
	shop, err := f.orders.Create(ctx, order.NewOrder{User: "u", RequestID: "basket-1", Lines: []order.Line{{SKU: "shop", Qty: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.orders.CancelOrder(ctx, shop.ID, order.ReasonUserCancel); err != nil {
		t.Fatal(err)
	}
	if _, err := f.orders.CancelOrder(ctx, theirs.ID, order.ReasonUserCancel); err != nil {
		t.Fatal(err)
	}
	if err := f.handleEvents(ctx, f.orderEvents(ctx)); err != nil {
		t.Fatal(err)
	}
	for name, ev := range map[string][]byte{
		"forged close of a pending order": statusEvent(mine, order.Pending, order.Closed, mine.Version+1),
		"forged payment of a pending one": statusEvent(mine, order.Pending, order.Paid, mine.Version+1),
		"event of an unknown order":       statusEvent(order.Order{ID: mine.ID + 1<<40, User: "u", Amount: 100}, order.Pending, order.Closed, 2),
		"event naming another user":       statusEvent(order.Order{ID: mine.ID, User: "v", Amount: 100}, order.Pending, order.Closed, 2),
	} {
		if err := f.s.HandleOrderEvent(ctx, nil, ev); err != nil && !errors.Is(err, outbox.ErrPoison) {
			t.Errorf("%s: %v, want it ignored or poison", name, err)
		}
	}
	for _, bad := range []string{
		`{"v":1,"id":"x","kind":"status","order":"abc","user":"u","at":1}`,
		`{"v":1,"id":"x","kind":"status","order":1,"user":"u","at":1} trailing`,
		`{"v":2,"id":"x","kind":"status","order":1,"user":"u","at":1}`,
		`[]`,
		``,
	} {
		if err := f.s.HandleOrderEvent(ctx, nil, []byte(bad)); !errors.Is(err, outbox.ErrPoison) || !errors.Is(err, order.ErrBadEvent) {
			t.Errorf("malformed event %q: %v, want order.ErrBadEvent, poison", bad, err)
		}
	}
	if left, _ := f.sl.RedisStock(ctx); left != 4 {
		t.Fatalf("c1's Redis stock %d, want 4: a foreign or forged event released its reservation", left)
	}
	if left, _ := other.RedisStock(ctx); left != 5 {
		t.Fatalf("c2's Redis stock %d, want 5: its cancelled unit is not back", left)
	}
	if _, err := f.sl.Buy(ctx, "u", 1); !errors.Is(err, seckill.ErrLimitReached) {
		t.Fatalf("u bought a second unit of c1: %v", err)
	}
	if _, err := other.Buy(ctx, "u", 1); err != nil {
		t.Fatalf("u's c2 quota did not come back: %v", err)
	}
	if again, err := f.orders.Get(ctx, mine.ID); err != nil || again.Status != order.Pending {
		t.Fatalf("c1's order is %+v, %v", again, err)
	}
	if rep, err := f.sl.Reconcile(ctx, false); err != nil || !rep.OK() {
		t.Fatalf("c1 after the events: %+v, %v", rep, err)
	}
}

// The buyer's own shop order, created under its reservation id before the
// consumer ran (the id is what Buy returned), on another SKU, and paid: the
// campaign's message is a conflict, and neither the paid shop order's event
// nor the release at the deadline may take it for the reservation's order —
// the campaign's unit was never sold in SQL, so it must come back to Redis.
func TestRedTeamOwnOrderUnderReservationID(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 10, 1, 1, seckill.Config{})
	id, err := f.sl.Buy(ctx, "eve", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.orders.PutSKU(ctx, "cheap", 1, 100); err != nil {
		t.Fatal(err)
	}
	shop, err := f.orders.Create(ctx, order.NewOrder{User: "eve", RequestID: id, Lines: []order.Line{{SKU: "cheap", Qty: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range f.drain(ctx) {
		if err := f.s.HandleOrder(ctx, nil, v); !errors.Is(err, seckill.ErrIDConflict) {
			t.Fatalf("campaign message for a recorded id of another SKU: %v, want ErrIDConflict", err)
		}
	}
	p, err := f.orders.StartPayment(ctx, shop.ID, "test")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := f.orders.HandleCallback(ctx, order.Callback{PayNo: p.PayNo, GatewayTxn: "t1", Amount: p.Amount, Currency: p.Currency, Success: true, PaidAt: f.clk.Now()}); err != nil || out != order.OutcomePaid {
		t.Fatalf("pay the shop order: %v, %v", out, err)
	}
	for _, ev := range f.orderEvents(ctx) {
		if err := f.s.HandleOrderEvent(ctx, nil, ev); err != nil && !errors.Is(err, outbox.ErrPoison) {
			t.Fatalf("event %s: %v", ev, err)
		}
	}
	if open, left := f.open(ctx), int64(0); open != 1 {
		left, _ = f.sl.RedisStock(ctx)
		t.Fatalf("the shop order's payment event closed the reservation: %d open, Redis stock %d", open, left)
	}
	f.clk.Add(16 * time.Minute)
	for range 2 {
		if _, err := f.sl.ReleaseDue(ctx); err != nil {
			t.Logf("release pass: %v", err)
		}
	}
	st, err := f.orders.StockOf(ctx, "sku-1")
	if err != nil {
		t.Fatal(err)
	}
	left, _ := f.sl.RedisStock(ctx)
	rep, rerr := f.sl.Reconcile(ctx, false)
	if left != st.Available || st.Available != 10 || rerr != nil || !rep.OK() {
		t.Fatalf("Redis stock %d, SQL available %d of sku-1, report %+v (%v): the shop order was taken for the reservation's", left, st.Available, rep, rerr)
	}
}

// Create again with the same rules after sales changes nothing; with other
// rules it is ErrInvalid and changes nothing.
func TestRedTeamCreateAgain(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 10, 1, 2, seckill.Config{})
	rules := seckill.Campaign{ID: "c1", SKU: "sku-1", Price: 100, Stock: 10, Limit: 1, Buckets: 2, Starts: saleStart, Ends: saleStart.Add(time.Hour)}
	for i := range 3 {
		if _, err := f.sl.Buy(ctx, fmt.Sprint("early", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	f.record(ctx)
	inFlight, err := f.sl.Buy(ctx, "flying", 1)
	if err != nil {
		t.Fatal(err)
	}
	if sl, err := f.s.Create(ctx, rules); err != nil || sl.Campaign().Stock != 10 {
		t.Fatalf("Create again with the same rules: %v", err)
	}
	for _, c := range []seckill.Campaign{
		func() seckill.Campaign { c := rules; c.Stock = 20; return c }(),
		func() seckill.Campaign { c := rules; c.Limit = 2; return c }(),
		func() seckill.Campaign { c := rules; c.Price = 1; return c }(),
		func() seckill.Campaign { c := rules; c.Buckets = 1; return c }(),
		func() seckill.Campaign { c := rules; c.Ends = c.Ends.Add(time.Hour); return c }(),
	} {
		if _, err := f.s.Create(ctx, c); !errors.Is(err, seckill.ErrInvalid) {
			t.Errorf("Create c1 with other rules %+v: %v, want ErrInvalid", c, err)
		}
	}
	if left, _ := f.sl.RedisStock(ctx); left != 6 {
		t.Fatalf("Redis stock %d after creating again, want 6", left)
	}
	for _, u := range []string{"early0", "flying"} {
		if _, err := f.sl.Buy(ctx, u, 1); !errors.Is(err, seckill.ErrLimitReached) {
			t.Fatalf("%s bought again after Create was repeated: %v", u, err)
		}
	}
	f.record(ctx)
	if o, err := f.s.OrderOf(ctx, "flying", inFlight); err != nil || o.Status != order.Pending {
		t.Fatalf("the order in flight during the repeated Create: %+v, %v", o, err)
	}
	st, _ := f.orders.StockOf(ctx, "sku-1")
	left, _ := f.sl.RedisStock(ctx)
	if rep, err := f.sl.Reconcile(ctx, false); err != nil || !rep.OK() || left != st.Available || left != 6 {
		t.Fatalf("c1 after the repeated Creates: Redis %d, SQL %d, %+v, %v; want 6 in both", left, st.Available, rep, err)
	}
}

// A buy of several units that does not fit where the stock is never sets
// the sold-out flag: a buyer of one unit after it is served.
func TestRedTeamSoldOutFlagAfterMultiUnitFailure(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name           string
		stock, buckets int64
		first, second  int64 // bought, then refused
	}{
		{"one-bucket", 5, 1, 3, 3},      // 2 left, 3 asked
		{"split", 4, 2, 0, 3},           // 2 + 2 left, 3 asked
		{"split-after-buy", 6, 3, 1, 3}, // 1 + 2 + 2 left, 3 asked
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, testenv.NewRedisCluster(t), tc.stock, 3, int(tc.buckets), seckill.Config{SoldOutFor: time.Hour})
			if tc.first > 0 {
				if _, err := f.sl.Buy(ctx, "a", tc.first); err != nil {
					t.Fatal(err)
				}
			}
			left, _ := f.sl.RedisStock(ctx)
			if _, err := f.sl.Buy(ctx, "b", tc.second); !errors.Is(err, seckill.ErrSoldOut) {
				t.Fatalf("%d units with %d left over %d buckets: %v", tc.second, left, tc.buckets, err)
			}
			if f.sl.SoldOut() {
				t.Fatalf("a refused buy of %d set the sold-out flag with %d units left", tc.second, left)
			}
			for i := range left {
				if _, err := f.sl.Buy(ctx, fmt.Sprint("single", i), 1); err != nil {
					t.Fatalf("buyer of one unit %d of %d left after the refused multi-unit buy: %v", i, left, err)
				}
			}
			if _, err := f.sl.Buy(ctx, "b", 1); !errors.Is(err, seckill.ErrSoldOut) || !f.sl.SoldOut() {
				t.Fatalf("after the last unit: %v, flag %v", err, f.sl.SoldOut())
			}
		})
	}
}

// Reconcile with repair runs in a loop while the consumer records the orders
// (redelivering some), release passes settle the lapsed half, buyers pay or
// cancel, and the order events are consumed: a repair acting on a passing
// difference would restock or lose units. Once settled, Redis and SQL agree,
// every unit is accounted for once, and each buyer's quota matches its order.
func TestRedTeamRepairRacesConsumersAndReleases(t *testing.T) {
	for _, repair := range []bool{false, true} {
		t.Run(fmt.Sprint("repair=", repair), func(t *testing.T) { raceSettlement(t, repair) })
	}
}

func raceSettlement(t *testing.T, repair bool) {
	ctx := context.Background()
	const n = 120
	f := setup(t, testenv.NewRedis(t), n, 1, 4, seckill.Config{})
	ids := make([]string, n)
	user := func(i int) string { return fmt.Sprintf("x%d", i) }
	for i := range n {
		if i == n/2 {
			f.clk.Add(10 * time.Minute)
		}
		id, err := f.sl.Buy(ctx, user(i), 1)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	values := f.drain(ctx)
	f.clk.Add(6 * time.Minute)
	var stop atomic.Bool
	var repairs atomic.Int64
	var wg, bg sync.WaitGroup
	var gaveUp atomic.Int64
	bg.Go(func() {
		for repair && !stop.Load() {
			rep, err := f.sl.Reconcile(ctx, true)
			if err != nil {
				gaveUp.Add(1) // "buckets kept changing": run it again
				continue
			}
			if rep.Repaired {
				repairs.Add(1)
			}
		}
	})
	bg.Go(func() {
		for !stop.Load() {
			if err := f.handleEvents(ctx, f.orderEvents(ctx)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for w := range 2 {
		wg.Go(func() {
			for i := w; i < len(values); i += 2 {
				for range 2 {
					if err := f.s.HandleOrder(ctx, nil, values[i]); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 4 {
			if _, err := f.sl.ReleaseDue(ctx); err != nil {
				t.Errorf("release pass: %v", err)
			}
		}
	})
	for i, id := range ids {
		if i%3 == 0 {
			continue // left alone
		}
		wg.Go(func() {
			for {
				o, err := f.s.OrderOf(ctx, user(i), id)
				if errors.Is(err, seckill.ErrNotReady) {
					time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
					continue
				}
				if err != nil {
					t.Errorf("OrderOf %s: %v", id, err)
					return
				}
				if i%3 == 1 {
					if err := f.pay(ctx, user(i), id); err != nil && !errors.Is(err, errRefused) {
						t.Errorf("pay %s: %v", id, err)
					}
				} else if _, err := f.orders.CancelOrder(ctx, o.ID, order.ReasonUserCancel); err != nil && !errors.Is(err, order.ErrIllegalTransition) {
					t.Errorf("cancel %s: %v", id, err)
				}
				return
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	bg.Wait()
	if gaveUp.Load() > 0 {
		// A repair that gave up may leave its buckets out of step (see
		// TestRedTeamInterruptedRepairKeepsStock): run it again, as its
		// error says, now that nothing races it.
		if _, err := f.sl.Reconcile(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	f.settle(ctx)
	t.Logf("%d repairs ran during the sale, %d gave up", repairs.Load(), gaveUp.Load())
	orders := f.balanced(ctx, n)
	lostQuotas := 0
	for i := range n {
		o, err := f.s.OrderOf(ctx, user(i), ids[i])
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if o.Status == order.Closed {
			want = 1
		}
		if repair && want == 1 {
			// A repair between a close and its settlement drops the
			// reservation and keeps the quota (see
			// TestRedTeamRepairBeforeCancelEventKeepsQuota): 0 or 1, never 2.
			if _, err := f.sl.Buy(ctx, user(i), 1); errors.Is(err, seckill.ErrLimitReached) {
				lostQuotas++
				continue
			} else if err != nil {
				t.Fatal(err)
			}
			want = 0
		}
		f.buyOnceMore(ctx, user(i), want)
	}
	if lostQuotas > 0 {
		t.Logf("%d released buyers lost their quota to a repair (known, skipped test)", lostQuotas)
	}
	t.Logf("SQL after the race: %v", orders)
}

// A second campaign on the SKU of a running one, with the same price and
// stock (what CreateSKU takes for a retry), is refused: a campaign sells a SKU
// of its own. Accepted, both gates sell the same SQL units and buyers told
// they won get orders closed out of stock.
func TestRedTeamSecondCampaignOnSameSKU(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 10, 1, 1, seckill.Config{})
	twin, err := f.s.Create(ctx, seckill.Campaign{ID: "c2", SKU: "sku-1", Price: 100, Stock: 10, Limit: 1, Buckets: 1, Starts: saleStart, Ends: saleStart.Add(time.Hour)})
	if errors.Is(err, seckill.ErrInvalid) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	won := 0
	for i := range 20 {
		for _, sl := range []*seckill.Sale{f.sl, twin} {
			if _, err := sl.Buy(ctx, fmt.Sprint("b", i), 1); err == nil {
				won++
			}
		}
	}
	f.record(ctx)
	c := &collect{}
	if _, err := outbox.NewRelay(f.r.Client, twin.Outboxes(), "orders", c).DrainAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, v := range c.values {
		if err := f.s.HandleOrder(ctx, nil, v); err != nil {
			t.Fatal(err)
		}
	}
	orders, stock := f.sqlCounts(ctx)
	t.Fatalf("c2 on c1's SKU accepted: %d buyers told they won 10 units, SQL %v, %d left; want ErrInvalid from Create", won, orders, stock)
}

// A campaign on a SKU the shop already sells (same price and units as the
// shop created it with) is refused: its stock would not be the campaign's.
func TestRedTeamCampaignOnShopSKU(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 10, 1, 1, seckill.Config{})
	if _, err := f.orders.CreateSKU(ctx, "shop-sku", 100, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.orders.Create(ctx, order.NewOrder{User: "shopper", RequestID: "r1", Lines: []order.Line{{SKU: "shop-sku", Qty: 3}}}); err != nil {
		t.Fatal(err)
	}
	sl, err := f.s.Create(ctx, seckill.Campaign{ID: "c3", SKU: "shop-sku", Price: 100, Stock: 10, Limit: 1, Buckets: 1, Starts: saleStart, Ends: saleStart.Add(time.Hour)})
	if errors.Is(err, seckill.ErrInvalid) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	// The shop keeps selling its SKU beside the campaign.
	if _, err := f.orders.Create(ctx, order.NewOrder{User: "shopper", RequestID: "r2", Lines: []order.Line{{SKU: "shop-sku", Qty: 2}}}); err != nil {
		t.Fatal(err)
	}
	won := 0
	for i := range 10 {
		if _, err := sl.Buy(ctx, fmt.Sprint("b", i), 1); err == nil {
			won++
		}
	}
	left, _ := sl.RedisStock(ctx)
	st, _ := f.orders.StockOf(ctx, "shop-sku")
	t.Fatalf("campaign of 10 on a shop SKU with 3 sold accepted: %d buyers told they won, Redis %d left, SQL %d available; want ErrInvalid", won, left, st.Available)
}

// A Create refused (its SKU exists with other stock) leaves no campaign
// behind that Open would return and Reconcile would load with another SKU's
// stock, and the id can be created afterwards with a SKU of its own.
func TestRedTeamRefusedCreateLeavesNothing(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 10, 1, 1, seckill.Config{})
	if _, err := f.orders.CreateSKU(ctx, "shop-sku", 100, 50); err != nil {
		t.Fatal(err)
	}
	c := seckill.Campaign{ID: "c4", SKU: "shop-sku", Price: 100, Stock: 5, Limit: 1, Buckets: 1, Starts: saleStart, Ends: saleStart.Add(time.Hour)}
	if _, err := f.s.Create(ctx, c); err == nil {
		t.Fatal("a campaign of 5 on a SKU of 50 was accepted")
	}
	if sl, err := f.s.Open(ctx, "c4"); !errors.Is(err, seckill.ErrNoCampaign) {
		msg := ""
		if err == nil {
			rep, rerr := sl.Reconcile(ctx, true)
			left, _ := sl.RedisStock(ctx)
			msg = fmt.Sprintf("; repaired %+v (%v), Redis now sells %d of shop-sku", rep, rerr, left)
		}
		t.Errorf("Open of the refused campaign: %v, want ErrNoCampaign%s", err, msg)
	}
	c.SKU = "c4-own"
	if _, err := f.s.Create(ctx, c); err != nil {
		t.Fatalf("Create c4 again with a SKU of its own: %v", err)
	}
}

// changeFirst is a go-redis hook that, before each rebuild script of one
// bucket (the only script given its fence key), changes that bucket as a
// release or quota return racing the repair would.
type changeFirst struct {
	fence, version string
	other          *testenv.Redis // a client without the hook
	n              atomic.Int64
}

func (h *changeFirst) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *changeFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fence != "" && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			for _, a := range cmd.Args() {
				if a == h.fence {
					h.n.Add(1)
					h.other.Client.Incr(ctx, h.version)
					break
				}
			}
		}
		return next(ctx, cmd)
	}
}

func (h *changeFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A repair whose last bucket keeps changing (releases do not wait for the
// fence) gives up, as documented — but it must not leave the buckets it did
// rewrite out of step with those it did not: Redis stock plus in flight must
// still equal SQL's stock, or Redis sells units SQL does not have.
func TestRedTeamInterruptedRepairKeepsStock(t *testing.T) {
	ctx := context.Background()
	base := testenv.NewRedis(t)
	r := ownClient(t, base, "")
	h := &changeFirst{other: base}
	r.Client.AddHook(h)
	f := setup(t, r, 8, 1, 2, seckill.Config{})
	var held []string
	for i := range 4 { // all homed on bucket 0: it empties, bucket 1 keeps 4
		id, err := f.sl.Buy(ctx, userOn(f.sl, 0, fmt.Sprint("z", i, "-")), 1)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, id)
	}
	f.record(ctx)
	// Redis forgets one reservation of bucket 0 (a Buy is a batch of one,
	// its own record): a repair is due.
	key, field, err := seckill.RecordOf(f.sl, held[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := base.Client.HDel(ctx, key, field).Err(); err != nil {
		t.Fatal(err)
	}
	rep, err := f.sl.Reconcile(ctx, false)
	if err != nil || rep.Missing != 1 || rep.Drift != 0 {
		t.Fatalf("before the repair: %+v, %v; want 1 missing, no drift", rep, err)
	}
	h.fence, h.version = f.sl.Key(1, "fence"), f.sl.Key(1, "version")
	_, err = f.sl.Reconcile(ctx, true)
	h.fence = ""
	t.Logf("repair with bucket 1 changing before each rewrite (%d times): %v", h.n.Load(), err)
	rep, rerr := f.sl.Reconcile(ctx, false)
	if rerr != nil || rep.Drift != 0 {
		won := 0
		for i := range 10 {
			if _, err := f.sl.Buy(ctx, fmt.Sprint("late", i), 1); err == nil {
				won++
			}
		}
		f.record(ctx)
		orders, _ := f.sqlCounts(ctx)
		t.Fatalf("after the interrupted repair: %+v (%v); then %d more buyers won, SQL %v", rep, rerr, won, orders)
	}
}

// A repair that runs between an order's cancel and the cancel's event (the
// reservation is stale: its units are back in SQL) restocks the units, and
// the buyer's quota must come back too: the event that arrives after it finds
// the reservation gone and returns nothing.
func TestRedTeamRepairBeforeCancelEventKeepsQuota(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 5, 1, 1, seckill.Config{})
	id, err := f.sl.Buy(ctx, "u", 1)
	if err != nil {
		t.Fatal(err)
	}
	f.record(ctx)
	o, err := f.s.OrderOf(ctx, "u", id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.orders.CancelOrder(ctx, o.ID, order.ReasonUserCancel); err != nil {
		t.Fatal(err)
	}
	if rep, err := f.sl.Reconcile(ctx, true); err != nil || rep.Stale != 1 || !rep.Repaired {
		t.Fatalf("repair of the stale reservation: %+v, %v", rep, err)
	}
	if err := f.handleEvents(ctx, f.orderEvents(ctx)); err != nil {
		t.Fatal(err)
	}
	f.balanced(ctx, 5)
	if left, _ := f.sl.RedisStock(ctx); left != 5 {
		t.Fatalf("Redis stock %d, want 5", left)
	}
	f.buyOnceMore(ctx, "u", 1)
}
