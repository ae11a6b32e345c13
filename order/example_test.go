package order_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/order"
)

// An order's life: created at the server's price with its stock reserved,
// paid by a callback (delivered twice), shipped; a second, unpaid order
// closes at its deadline and gives its stock back.
func Example() {
	ctx := context.Background()
	r, err := devstack.OpenRedis(ctx, os.Getenv(devstack.EnvRedisAddr))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	sqls, err := devstack.FromEnv().OpenSQLs(ctx, "example", 2) // a service passes its own databases
	if err != nil {
		fmt.Println(err)
		return
	}
	dbs := []*sqlx.DB{sqls[0].DB, sqls[1].DB}
	defer sqls[0].Close()
	defer sqls[1].Close()
	ns := "example:" + devstack.RandomHex(4)
	defer devstack.DeleteKeys(ctx, r.Client, ns+"*")

	// The services' clock, moved by the example (atomic: they read it from
	// their own goroutines too).
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	svc, _ := order.New(r.Client, dbs, order.Config{Namespace: ns, TablesPerDB: 2, Now: clock})
	defer svc.Close()
	svc.Migrate(ctx)
	svc.PutSKU(ctx, "phone", 3999_00, 5)

	o, _ := svc.Create(ctx, order.NewOrder{User: "ann", RequestID: "checkout-1", Lines: []order.Line{{SKU: "phone", Qty: 1}}})
	fmt.Println(o.Status, o.Amount, o.Reserved)
	p, _ := svc.StartPayment(ctx, o.ID, "wechat")
	for range 2 { // gateways deliver callbacks more than once
		out, _ := svc.HandleCallback(ctx, order.Callback{PayNo: p.PayNo, GatewayTxn: "wx-1", Amount: p.Amount, Currency: "CNY", Success: true})
		fmt.Println("callback:", out)
	}
	shipped, _ := svc.Ship(ctx, o.ID)
	fmt.Println(shipped.Status)

	late, _ := svc.Create(ctx, order.NewOrder{User: "bo", RequestID: "checkout-1", Lines: []order.Line{{SKU: "phone", Qty: 2}}})
	now.Add(int64(31 * time.Minute))
	svc.Sweep(ctx, 100)
	late, _ = svc.Get(ctx, late.ID)
	st, _ := svc.StockOf(ctx, "phone")
	fmt.Println(late.Status, late.CloseReason, st.Available, st.Locked, st.Sold)
	_, err = svc.Ship(ctx, late.ID)
	fmt.Println(errors.Is(err, order.ErrIllegalTransition))
	// Output:
	// pending 399900 true
	// callback: paid
	// callback: paid
	// shipped
	// closed timeout 4 0 1
	// true
}
