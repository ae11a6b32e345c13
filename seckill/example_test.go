package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/seckill"
)

// Two units, one per buyer, three buyers: the gate decides in Redis, the
// orders reach the order block through the outbox, one buyer pays and the
// other's unit comes back, to Redis and to SQL, after the payment timeout.
func Example() {
	ctx := context.Background()
	sc, err := devstack.OpenScratch(ctx, "example") // a service passes its own clients
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sc.Close()

	// The services' clock, moved by the example (atomic: they read it from
	// their own goroutines too).
	var now atomic.Int64
	now.Store(testenv.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	ids, _ := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 1})
	defer ids.Close()
	orders, _ := order.New(sc.Redis, []*sqlx.DB{sc.SQL}, order.Config{Namespace: sc.Namespace, Now: clock})
	defer orders.Close()
	orders.Migrate(ctx)
	svc, _ := seckill.New(sc.Redis, sc.SQL, orders, seckill.Config{Namespace: sc.Namespace, IDs: ids, Now: clock})
	svc.Migrate(ctx)
	sale, _ := svc.Create(ctx, seckill.Campaign{ID: "phone-drop", SKU: "phone", Price: 99900, Stock: 2, Limit: 1, Buckets: 1, Starts: clock(), Ends: clock().Add(time.Hour)})

	won := map[string]string{}
	for _, buyer := range []string{"ann", "bo", "ann", "cy"} {
		id, err := sale.Buy(ctx, buyer, 1)
		switch {
		case err == nil:
			won[buyer] = id
			fmt.Println(buyer, "won")
		default:
			fmt.Println(buyer, errors.Is(err, seckill.ErrLimitReached), errors.Is(err, seckill.ErrSoldOut))
		}
	}
	// The relay and the consumer: the orders are created in the order block.
	outbox.NewRelay(sc.Redis, sale.Outboxes(), "orders", outbox.Direct(svc.HandleOrder)).DrainAll(ctx)

	// Ann pays: the gateway's callback for her payment attempt.
	o, _ := svc.OrderOf(ctx, "ann", won["ann"])
	p, _ := orders.StartPayment(ctx, o.ID, "wechat")
	outcome, _ := orders.HandleCallback(ctx, order.Callback{PayNo: p.PayNo, GatewayTxn: "wx-1", Amount: p.Amount, Currency: p.Currency, Success: true, PaidAt: clock()})
	fmt.Println("ann pays", p.Amount, "fen:", outcome)

	now.Add(int64(16 * time.Minute)) // bo never pays
	released, _ := sale.ReleaseDue(ctx)
	left, _ := sale.RedisStock(ctx)
	st, _ := orders.StockOf(ctx, "phone")
	fmt.Println("released", released, "back on sale", left, "in SQL", st.Available, "sold", st.Sold)
	// Output:
	// ann won
	// bo won
	// ann true false
	// cy false true
	// ann pays 99900 fen: paid
	// released 1 back on sale 1 in SQL 1 sold 1
}
