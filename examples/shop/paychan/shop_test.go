package paychan_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/examples/shop/paychan"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A real order.Service behind its CallbackHandler: every callback the channel
// sends pays its order once, the dropped ones are found by the active query,
// and the statement then reconciles with no difference.
func TestOrderService(t *testing.T) {
	const n = 40
	ctx := context.Background()
	r := testenv.NewRedis(t)
	svc, err := order.New(r.Client, testenv.NewSQLs(t, 2), order.Config{Namespace: r.Namespace, TablesPerDB: 2, Now: testenv.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	if err := svc.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := svc.PutSKU(ctx, "phone", 3999_00, n); err != nil {
		t.Fatal(err)
	}
	notify := httptest.NewServer(svc.CallbackHandler(order.RSAVerifier{Key: &testKey().PublicKey, Now: testenv.Now}))
	t.Cleanup(notify.Close)
	retries := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond, 160 * time.Millisecond}
	ch := start(t, paychan.Config{NotifyURL: notify.URL + "/pay/notify", DropRate: 0.25, DupRate: 0.25, Jitter: 5 * time.Millisecond, Seed: 4, Retries: retries, Now: testenv.Now})
	cl := ch.Client()

	from := testenv.Now()
	var orders []int64
	for i := range n {
		o, err := svc.Create(ctx, order.NewOrder{User: "u" + strconv.Itoa(i), RequestID: "checkout", Lines: []order.Line{{SKU: "phone", Qty: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := svc.StartPayment(ctx, o.ID, "paychan")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Pay(ctx, p.PayNo, p.Amount, p.Currency); err != nil {
			t.Fatal(err)
		}
		orders = append(orders, o.ID)
	}
	wait(t, ch)
	to := testenv.Now().Add(time.Second)
	st := ch.Stats()
	t.Logf("%+v", st)
	if st.Dropped == 0 || st.Duplicated == 0 || st.Dropped+st.Acknowledged != n || st.Refused+st.Abandoned != 0 {
		t.Fatalf("stats %+v", st)
	}
	if paid := countPaid(t, svc, orders); paid != n-int(st.Dropped) {
		t.Fatalf("%d orders paid by callbacks; %+v", paid, st)
	}

	// The statement lists the dropped ones as awaiting their callback.
	lines, err := cl.Statement(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := svc.Reconcile(ctx, lines, from, to, time.Hour)
	if err != nil || rep.Lines != n || rep.Matched != n-int(st.Dropped) || rep.Awaiting != int(st.Dropped) || len(rep.Diffs) != 0 {
		t.Fatalf("reconcile: %+v %v", rep, err)
	}

	// The active query finds exactly the dropped callbacks' money.
	resolved, err := svc.RecoverPayments(ctx, cl, time.Hour, 100)
	if err != nil || resolved != int(st.Dropped) {
		t.Fatalf("recovered %d of %d dropped: %v", resolved, st.Dropped, err)
	}
	if paid := countPaid(t, svc, orders); paid != n {
		t.Fatalf("%d of %d orders paid after recovery", paid, n)
	}
	rep, err = svc.Reconcile(ctx, lines, from, to, time.Hour)
	if err != nil || rep.Matched != n || len(rep.Diffs) != 0 {
		t.Fatalf("reconcile after recovery: %+v %v", rep, err)
	}
	if stock, err := svc.StockOf(ctx, "phone"); err != nil || stock.Sold+stock.Locked != n {
		t.Errorf("stock %+v %v", stock, err)
	}
}

func countPaid(t *testing.T, svc *order.Service, ids []int64) int {
	t.Helper()
	paid := 0
	for _, id := range ids {
		o, err := svc.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if o.Status == order.Paid {
			paid++
		}
	}
	return paid
}
