package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/seckill"
)

// Two units, one per buyer, three buyers: the gate decides in Redis, the
// orders reach SQL through the outbox, one buyer pays and the other's unit
// comes back after the payment timeout.
func Example() {
	ctx := context.Background()
	sc, err := devstack.OpenScratch(ctx, "example") // a service passes its own clients
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sc.Close()

	now := time.Now()
	ids, _ := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 1})
	defer ids.Close()
	svc, _ := seckill.New(sc.Redis, sc.SQL, seckill.Config{Namespace: sc.Namespace, IDs: ids, Now: func() time.Time { return now }})
	svc.Migrate(ctx)
	sale, _ := svc.Create(ctx, seckill.Campaign{ID: "phone-drop", SKU: "phone", Stock: 2, Limit: 1, Buckets: 1, Starts: now, Ends: now.Add(time.Hour)})

	var won []string
	for _, buyer := range []string{"ann", "bo", "ann", "cy"} {
		id, err := sale.Buy(ctx, buyer, 1)
		switch {
		case err == nil:
			won = append(won, id)
			fmt.Println(buyer, "won")
		default:
			fmt.Println(buyer, errors.Is(err, seckill.ErrLimitReached), errors.Is(err, seckill.ErrSoldOut))
		}
	}
	outbox.NewRelay(sc.Redis, sale.Outboxes(), "orders", outbox.Direct(svc.HandleOrder)).DrainAll(ctx)
	fmt.Println("ann pays:", svc.Pay(ctx, won[0]))

	now = now.Add(16 * time.Minute) // bo never pays
	released, _ := sale.ReleaseDue(ctx)
	left, _ := sale.RedisStock(ctx)
	fmt.Println("released", released, "back on sale", left)
	// Output:
	// ann won
	// bo won
	// ann true false
	// cy false true
	// ann pays: <nil>
	// released 1 back on sale 1
}
