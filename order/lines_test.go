package order_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/order"
)

// paid creates an order of lines for user and pays it.
func (f *fixture) paid(user, req string, lines ...order.Line) order.Order {
	f.t.Helper()
	o := f.create(user, req, lines...)
	if _, out := f.pay(o, "tx-"+user+"-"+req); out != order.OutcomePaid {
		f.t.Fatalf("pay %d: %s", o.ID, out)
	}
	return f.get(o.ID)
}

func item(o order.Order, sku string) order.Item {
	for _, it := range o.Items {
		if it.SKU == sku {
			return it
		}
	}
	return order.Item{}
}

// Parcels ship an order in parts: Paid → PartiallyShipped → Shipped, each
// line at most what it has left; a repeated parcel request returns the
// first parcel and ships nothing; bad requests change nothing; each parcel
// is announced by exactly one event; the last parcel schedules the
// auto-completion.
func TestShipParcels(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{AutoComplete: time.Hour})
	f.sku("a", 100, 10)
	f.sku("b", 250, 10)
	o := f.paid("u", "r", order.Line{SKU: "a", Qty: 3}, order.Line{SKU: "b", Qty: 1})

	p1, got, err := f.s.ShipParcel(ctx, o.ID, order.NewParcel{RequestID: "wh-1", Lines: []order.Line{{SKU: "a", Qty: 2}}, Tracking: "SF123"})
	if err != nil || got.Status != order.PartiallyShipped || item(got, "a").Shipped != 2 || item(got, "a").ToShip() != 1 || !got.ShippedAt.IsZero() {
		t.Fatalf("first parcel: %+v, %+v, %v", p1, got, err)
	}
	again, same, err := f.s.ShipParcel(ctx, o.ID, order.NewParcel{RequestID: "wh-1", Lines: []order.Line{{SKU: "a", Qty: 2}}, Tracking: "SF123"})
	if err != nil || again.ParcelNo != p1.ParcelNo || same.Version != got.Version {
		t.Fatalf("repeated parcel: %+v (first %d), v%d (was v%d), %v", again, p1.ParcelNo, same.Version, got.Version, err)
	}
	for name, c := range map[string]struct {
		p    order.NewParcel
		want error
	}{
		"same id, other lines": {order.NewParcel{RequestID: "wh-1", Lines: []order.Line{{SKU: "a", Qty: 1}}, Tracking: "SF123"}, order.ErrInvalid},
		"unknown sku":          {order.NewParcel{RequestID: "x1", Lines: []order.Line{{SKU: "zz", Qty: 1}}}, order.ErrInvalid},
		"zero units":           {order.NewParcel{RequestID: "x2", Lines: []order.Line{{SKU: "a", Qty: 0}}}, order.ErrInvalid},
		"negative units":       {order.NewParcel{RequestID: "x3", Lines: []order.Line{{SKU: "a", Qty: -1}}}, order.ErrInvalid},
		"a line twice":         {order.NewParcel{RequestID: "x4", Lines: []order.Line{{SKU: "a", Qty: 1}, {SKU: "a", Qty: 1}}}, order.ErrInvalid},
		"no lines":             {order.NewParcel{RequestID: "x5"}, order.ErrInvalid},
		"no request id":        {order.NewParcel{Lines: []order.Line{{SKU: "a", Qty: 1}}}, order.ErrInvalid},
		"bad tracking":         {order.NewParcel{RequestID: "x6", Lines: []order.Line{{SKU: "a", Qty: 1}}, Tracking: "has space"}, order.ErrInvalid},
		"more than left":       {order.NewParcel{RequestID: "x7", Lines: []order.Line{{SKU: "a", Qty: 2}}}, order.ErrQuantity},
		"one good, one over":   {order.NewParcel{RequestID: "x8", Lines: []order.Line{{SKU: "b", Qty: 1}, {SKU: "a", Qty: 2}}}, order.ErrQuantity},
	} {
		if _, _, err := f.s.ShipParcel(ctx, o.ID, c.p); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if now := f.get(o.ID); now.Version != got.Version || item(now, "b").Shipped != 0 {
		t.Fatalf("refused parcels changed the order: v%d → v%d, %+v", got.Version, now.Version, now.Items)
	}
	if _, _, err := f.s.ShipParcel(ctx, o.ID+1<<20, order.NewParcel{RequestID: "x", Lines: []order.Line{{SKU: "a", Qty: 1}}}); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("parcel of an unknown order: %v", err)
	}

	shipped, err := f.s.Ship(ctx, o.ID) // the rest: a×1, b×1
	if err != nil || shipped.Status != order.Shipped || !shipped.ShippedAt.Equal(f.clk.Now().Truncate(time.Millisecond)) || item(shipped, "a").ToShip() != 0 || item(shipped, "b").Shipped != 1 {
		t.Fatalf("Ship of the rest: %+v, %v", shipped, err)
	}
	if again, err := f.s.Ship(ctx, o.ID); err != nil || again.Version != shipped.Version {
		t.Fatalf("Ship again: %+v, %v", again, err)
	}
	if _, _, err := f.s.ShipParcel(ctx, o.ID, order.NewParcel{RequestID: "late", Lines: []order.Line{{SKU: "a", Qty: 1}}}); !errors.Is(err, order.ErrIllegalTransition) {
		t.Fatalf("a parcel of a shipped order: %v", err)
	}
	if p, _, err := f.s.ShipParcel(ctx, o.ID, order.NewParcel{RequestID: "wh-1", Lines: []order.Line{{SKU: "a", Qty: 2}}, Tracking: "SF123"}); err != nil || p.ParcelNo != p1.ParcelNo {
		t.Fatalf("a repeat after the order moved on: %+v, %v", p, err)
	}
	parcels, err := f.s.Parcels(ctx, o.ID)
	if err != nil || len(parcels) != 2 || parcels[0].Tracking != "SF123" || parcels[1].RequestID != "" || fmt.Sprint(parcels[1].Lines) != "[{a 1} {b 1}]" {
		t.Fatalf("parcels: %+v, %v", parcels, err)
	}

	pub := &memPub{}
	f.relayAll(pub)
	events := pub.events(t)
	for _, p := range parcels {
		if n := events[fmt.Sprint("p", p.ParcelNo)]; n != 1 {
			t.Errorf("parcel %d announced %d times", p.ParcelNo, n)
		}
	}
	var kinds []string
	for _, m := range pub.msgs {
		if e, _ := order.DecodeEvent(m.Value); e.Kind == order.EventParcel || e.Kind == order.EventStatus && e.From != order.Pending {
			kinds = append(kinds, fmt.Sprintf("%s:%s%s%v", e.Kind, e.From, e.To, e.Lines))
		}
	}
	if got := strings.Join(kinds, " "); got != "status:paidpartly_shipped[] parcel:[{a 2}] status:partly_shippedshipped[] parcel:[{a 1} {b 1}]" {
		t.Fatalf("events: %s", got)
	}

	f.clk.Add(time.Hour)
	if n, err := f.s.RunDue(ctx, 10); err != nil || n != 1 || f.get(o.ID).Status != order.Completed {
		t.Fatalf("auto-complete after the last parcel: %d, %v", n, err)
	}
}

// Line refunds: money is Qty × the line's price, stock goes back per line,
// a line never refunds more than it bought, unshipped units go first, a
// repeat returns the first refund, bad requests change nothing, and money
// refunded by amount and by line never exceeds what was paid.
func TestRefundLines(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("a", 100, 10)
	f.sku("b", 250, 10)
	o := f.paid("u", "r", order.Line{SKU: "a", Qty: 3}, order.Line{SKU: "b", Qty: 2}) // 800
	stock := func(sku string, avail, sold int64) {
		t.Helper()
		if st := f.stock(sku); st.Available != avail || st.Sold != sold || st.Locked != 0 {
			t.Fatalf("%s: %+v, want %d available, %d sold", sku, st, avail, sold)
		}
	}
	stock("a", 7, 3)

	r1, err := f.s.RefundLines(ctx, o.ID, []order.Line{{SKU: "a", Qty: 1}, {SKU: "b", Qty: 1}}, "out_of_stock", "rl-1")
	if err != nil || r1.Amount != 350 || len(r1.Lines) != 2 || !r1.Lines[0].Restocked || r1.Lines[1].Amount != 250 || r1.PayNo != o.PayNo {
		t.Fatalf("line refund: %+v, %v", r1, err)
	}
	stock("a", 8, 2)
	stock("b", 9, 1)
	after := f.get(o.ID)
	if after.Status != order.Paid || item(after, "a").Refunded != 1 || item(after, "a").ToShip() != 2 {
		t.Fatalf("after a line refund: %+v", after)
	}
	if again, err := f.s.RefundLines(ctx, o.ID, []order.Line{{SKU: "b", Qty: 1}, {SKU: "a", Qty: 1}}, "out_of_stock", "rl-1"); err != nil || again.RefundNo != r1.RefundNo {
		t.Fatalf("repeat: %+v, %v", again, err)
	}
	stock("a", 8, 2)
	amount, err := f.s.RequestRefund(ctx, o.ID, 300, "goodwill", "amt-1") // Paid → Refunding
	if err != nil {
		t.Fatal(err)
	}
	// One request id names one refund: an amount refund under a line
	// refund's id, or under its own id with another amount, is refused.
	if r, err := f.s.RequestRefund(ctx, o.ID, 350, "goodwill", "rl-1"); !errors.Is(err, order.ErrInvalid) {
		t.Errorf("an amount refund under a line refund's id: %+v, %v; want ErrInvalid", r, err)
	}
	if r, err := f.s.RequestRefund(ctx, o.ID, 100, "goodwill", "amt-1"); !errors.Is(err, order.ErrInvalid) {
		t.Errorf("a repeat asking another amount: %+v, %v; want ErrInvalid", r, err)
	}
	if r, err := f.s.RequestRefund(ctx, o.ID, 300, "goodwill", "amt-1"); err != nil || r.RefundNo != amount.RefundNo {
		t.Errorf("a repeat: %+v, %v; want refund %d", r, err, amount.RefundNo)
	}
	for name, c := range map[string]struct {
		lines []order.Line
		req   string
		want  error
	}{
		"same id, other lines":   {[]order.Line{{SKU: "a", Qty: 2}}, "rl-1", order.ErrInvalid},
		"an amount refund's id":  {[]order.Line{{SKU: "a", Qty: 1}}, "amt-1", order.ErrInvalid},
		"unknown sku":            {[]order.Line{{SKU: "zz", Qty: 1}}, "x1", order.ErrInvalid},
		"zero units":             {[]order.Line{{SKU: "a", Qty: 0}}, "x2", order.ErrInvalid},
		"a line twice":           {[]order.Line{{SKU: "a", Qty: 1}, {SKU: "a", Qty: 1}}, "x3", order.ErrInvalid},
		"no lines":               {nil, "x4", order.ErrInvalid},
		"more than bought":       {[]order.Line{{SKU: "b", Qty: 2}}, "x5", order.ErrQuantity},
		"more than paid is left": {[]order.Line{{SKU: "a", Qty: 2}, {SKU: "b", Qty: 1}}, "x6", order.ErrRefundTooLarge}, // 450 > 800 − 350 − 300
	} {
		if _, err := f.s.RefundLines(ctx, o.ID, c.lines, "x", c.req); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if now := f.get(o.ID); now.Status != order.Refunding || item(now, "a").Refunded != 1 || item(now, "b").Refunded != 1 {
		t.Fatalf("refused refunds changed the order: %+v", now)
	}
	stock("a", 8, 2)
	stock("b", 9, 1)
	// A line refund while the amount refund is paid back: allowed; the order
	// goes back to Paid only when neither is due any more.
	r2, err := f.s.RefundLines(ctx, o.ID, []order.Line{{SKU: "a", Qty: 1}}, "damaged", "rl-2")
	if err != nil || r2.Amount != 100 {
		t.Fatalf("line refund while refunding: %+v, %v", r2, err)
	}
	f.s.RefundPaid(ctx, amount.RefundNo)
	if now := f.get(o.ID); now.Status != order.Refunding || now.Refunded != 300 {
		t.Fatalf("amount refund paid, a line refund still due: %+v", now)
	}
	f.s.RefundPaid(ctx, r1.RefundNo)
	f.s.RefundPaid(ctx, r2.RefundNo)
	f.s.RefundPaid(ctx, r2.RefundNo)
	if now := f.get(o.ID); now.Status != order.Paid || now.Refunded != 750 {
		t.Fatalf("all paid back: %+v", now)
	}
	// 50 fen are left, and one unit of a (100): shipping it is still owed.
	if _, err := f.s.RefundLines(ctx, o.ID, []order.Line{{SKU: "a", Qty: 1}}, "x", "rl-3"); !errors.Is(err, order.ErrRefundTooLarge) {
		t.Fatalf("a line worth more than is left: %v", err)
	}
	if shipped, err := f.s.Ship(ctx, o.ID); err != nil || shipped.Status != order.Shipped || fmt.Sprint(shipped.Items) != "[{a 3 100 1 2} {b 2 250 1 1}]" {
		t.Fatalf("ship what is left: %+v, %v", shipped, err)
	}
	rs, err := f.s.Refunds(ctx, o.ID)
	if err != nil || len(rs) != 3 || rs[1].Lines != nil || len(rs[2].Lines) != 1 {
		t.Fatalf("refunds: %+v, %v", rs, err)
	}
	if got, err := f.s.RefundOf(ctx, r1.RefundNo); err != nil || len(got.Lines) != 2 || got.Status != order.RefundDone {
		t.Fatalf("RefundOf: %+v, %v", got, err)
	}

	pending := f.create("v", "r", order.Line{SKU: "a", Qty: 1})
	if _, err := f.s.RefundLines(ctx, pending.ID, []order.Line{{SKU: "a", Qty: 1}}, "x", "r"); !errors.Is(err, order.ErrIllegalTransition) {
		t.Fatalf("line refund of an unpaid order: %v", err)
	}
	if _, err := f.s.RefundLines(ctx, o.ID, []order.Line{{SKU: "a", Qty: 1}}, "", "r"); !errors.Is(err, order.ErrInvalid) {
		t.Fatalf("no reason: %v", err)
	}
}

// Refunds after shipping are returns, and refunds of all that is left move
// the order on: the rest of a partly shipped order refunded → Shipped;
// every fen requested back → Refunding, then Refunded once paid back; the
// stock of every refunded unit is back.
func TestRefundLinesAndShipments(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{})
	f.sku("a", 100, 10)
	f.sku("b", 250, 10)
	o := f.paid("u", "r", order.Line{SKU: "a", Qty: 2}, order.Line{SKU: "b", Qty: 2}) // 700
	if _, _, err := f.s.ShipParcel(ctx, o.ID, order.NewParcel{RequestID: "p1", Lines: []order.Line{{SKU: "a", Qty: 2}, {SKU: "b", Qty: 1}}}); err != nil {
		t.Fatal(err)
	}
	// b×2: the unshipped unit is cancelled, the shipped one returned; nothing
	// is left to ship.
	r1, err := f.s.RefundLines(ctx, o.ID, []order.Line{{SKU: "b", Qty: 2}}, "return", "rl-1")
	if err != nil || r1.Amount != 500 {
		t.Fatalf("%+v, %v", r1, err)
	}
	now := f.get(o.ID)
	if now.Status != order.Shipped || now.ShippedAt.IsZero() || item(now, "b").ToShip() != 0 || item(now, "b").Refunded != 2 {
		t.Fatalf("after refunding the rest: %+v", now)
	}
	if st := f.stock("b"); st.Available != 10 || st.Sold != 0 {
		t.Fatalf("b stock: %+v", st)
	}
	if _, err := f.s.RefundLines(ctx, o.ID, []order.Line{{SKU: "b", Qty: 1}}, "return", "rl-2"); !errors.Is(err, order.ErrQuantity) {
		t.Fatalf("a line refunded beyond what it bought: %v", err)
	}
	if _, err := f.s.Complete(ctx, o.ID); err != nil {
		t.Fatal(err)
	}
	r2, err := f.s.RefundLines(ctx, o.ID, []order.Line{{SKU: "a", Qty: 2}}, "return", "rl-3") // every fen: Completed → Refunding
	if err != nil || f.get(o.ID).Status != order.Refunding {
		t.Fatalf("refunding the rest of a completed order: %+v, %v, %s", r2, err, f.get(o.ID).Status)
	}
	f.s.RefundPaid(ctx, r1.RefundNo)
	if got := f.get(o.ID); got.Status != order.Refunding {
		t.Fatalf("half paid back: %s", got.Status)
	}
	f.s.RefundPaid(ctx, r2.RefundNo)
	if got := f.get(o.ID); got.Status != order.Refunded || got.Refunded != 700 {
		t.Fatalf("all paid back: %+v", got)
	}
	st, holds, err := f.s.Holds(ctx, "a")
	if err != nil || st.Available != 10 || len(holds) != 1 || holds[0].Returned != 2 || holds[0].State != order.HoldSold {
		t.Fatalf("a: %+v, holds %+v, %v", st, holds, err)
	}
	// An order refunded whole before it shipped: nothing left to ship.
	w := f.paid("w", "r", order.Line{SKU: "a", Qty: 1})
	if _, err := f.s.RefundLines(ctx, w.ID, []order.Line{{SKU: "a", Qty: 1}}, "cancel", "all"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Ship(ctx, w.ID); !errors.Is(err, order.ErrIllegalTransition) {
		t.Fatalf("ship an order refunded whole: %v", err)
	}
}

// A double click — the same request id 20 times at once — starts one
// payment attempt; a repeat after the order was paid still returns it; a
// different request id starts another, as StartPayment always does.
func TestStartPaymentRequest(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{PayTimeout: 30 * time.Minute})
	f.sku("s", 100, 10)
	o := f.create("u", "r", order.Line{SKU: "s", Qty: 1})
	pays := make([]order.Payment, 20)
	var wg sync.WaitGroup
	for i := range pays {
		wg.Go(func() {
			p, err := f.s.StartPaymentRequest(ctx, o.ID, "wechat", "click-1")
			if err != nil {
				t.Error(err)
			}
			pays[i] = p
		})
	}
	wg.Wait()
	for _, p := range pays {
		if p.PayNo != pays[0].PayNo || p.PayNo == 0 {
			t.Fatalf("one request started attempts %d and %d", pays[0].PayNo, p.PayNo)
		}
	}
	// The channel is asked about every open attempt: there is one.
	asked := askedChannel{}
	if _, err := f.s.RecoverPayments(ctx, asked, time.Hour, 100); err != nil || len(asked) != 1 || !asked[pays[0].PayNo] {
		t.Fatalf("open attempts %v, %v; want only %d", asked, err, pays[0].PayNo)
	}
	if _, err := f.s.StartPaymentRequest(ctx, o.ID, "alipay", "click-1"); !errors.Is(err, order.ErrInvalid) {
		t.Fatalf("the same request on another channel: %v", err)
	}
	other, err := f.s.StartPaymentRequest(ctx, o.ID, "alipay", "click-2")
	if err != nil || other.PayNo == pays[0].PayNo {
		t.Fatalf("another request: %+v, %v", other, err)
	}
	if _, err := f.s.HandleCallback(ctx, order.Callback{PayNo: pays[0].PayNo, GatewayTxn: "wx", Amount: 100, Currency: "CNY", Success: true}); err != nil {
		t.Fatal(err)
	}
	if again, err := f.s.StartPaymentRequest(ctx, o.ID, "wechat", "click-1"); err != nil || again.PayNo != pays[0].PayNo || again.Status != order.PaymentSucceeded {
		t.Fatalf("the request repeated after the payment: %+v, %v", again, err)
	}
	if _, err := f.s.StartPaymentRequest(ctx, o.ID, "wechat", "click-3"); !errors.Is(err, order.ErrIllegalTransition) {
		t.Fatalf("a new request for a paid order: %v", err)
	}
	if _, err := f.s.StartPaymentRequest(ctx, o.ID, "wechat", ""); !errors.Is(err, order.ErrInvalid) {
		t.Fatalf("no request id: %v", err)
	}
}

// askedChannel records which attempts RecoverPayments asked about.
type askedChannel map[int64]bool

func (c askedChannel) Query(_ context.Context, payNo int64) (order.Callback, bool, error) {
	c[payNo] = true
	return order.Callback{}, false, nil
}

// A database made by the schema before line refunds and parcels (their
// tables missing) is brought up to date by Migrate alone, online, and its
// orders — paid, or shipped whole before parcels existed — refund by line
// and ship by parcel.
func TestMigrateAddsLineTables(t *testing.T) {
	ctx := context.Background()
	f := setup(t, order.Config{TablesPerDB: 1})
	f.sku("a", 100, 10)
	paid := f.paid("u1", "r", order.Line{SKU: "a", Qty: 2})
	shipped := f.paid("u2", "r", order.Line{SKU: "a", Qty: 1})
	if _, err := f.s.Ship(ctx, shipped.ID); err != nil {
		t.Fatal(err)
	}
	for i, db := range f.dbs { // back to the old schema; an old Ship wrote no parcel and no shipped count
		n := fmt.Sprintf("_%03d", i) // one table per database
		for _, tb := range []string{"pay_requests", "refund_lines", "parcels", "inventory_returns"} {
			if _, err := db.Exec(`DROP TABLE ` + tb + n); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.Exec(`UPDATE orders` + n + ` SET items = REPLACE(items, ',"shipped":1', '')`); err != nil {
			t.Fatal(err)
		}
	}
	if it := item(f.get(shipped.ID), "a"); it.Shipped != 1 {
		t.Fatalf("an order shipped whole before parcels reads %+v", it)
	}
	if err := f.s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.s.ShipParcel(ctx, paid.ID, order.NewParcel{RequestID: "p", Lines: []order.Line{{SKU: "a", Qty: 1}}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{paid.ID, shipped.ID} {
		if _, err := f.s.RefundLines(ctx, id, []order.Line{{SKU: "a", Qty: 1}}, "return", "r"); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.get(paid.ID); got.Status != order.Shipped || item(got, "a").Refunded != 1 {
		t.Fatalf("old paid order: %+v", got)
	}
	if st := f.stock("a"); st.Available != 9 || st.Sold != 1 {
		t.Fatalf("stock: %+v", st)
	}
}
