package redpacket_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/redpacket"
)

// Send a packet of ¥9 for 3, let three friends open it (one twice), record
// the claims in SQL, and refund what is left at expiry.
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
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	svc, _ := redpacket.New(sc.Redis, []*sqlx.DB{sc.SQL}, redpacket.Config{Namespace: sc.Namespace, Now: clock})
	defer svc.Close()
	svc.Migrate(ctx)
	svc.Deposit(ctx, "grandma", 100_00)

	p, _ := svc.Send(ctx, redpacket.SendRequest{Sender: "grandma", RequestID: "cny-1", Total: 9_00, Count: 3, Kind: redpacket.Fixed})
	for _, who := range []string{"ann", "bo", "ann"} {
		fen, err := svc.Open(ctx, p.ID, who)
		fmt.Println(who, fen, err)
	}
	relay := outbox.NewRelay(sc.Redis, svc.Outboxes(), "claims", outbox.Direct(svc.Handle))
	relay.DrainAll(ctx)

	now.Add(int64(25 * time.Hour))
	refund, _ := svc.Refund(ctx, p.ID)
	ann, _ := svc.Balance(ctx, "ann")
	gm, _ := svc.Balance(ctx, "grandma")
	fmt.Println("refund", refund, "ann", ann, "grandma", gm)
	// Output:
	// ann 300 <nil>
	// bo 300 <nil>
	// ann 300 <nil>
	// refund 300 ann 300 grandma 9400
}
