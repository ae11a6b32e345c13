package redpacket_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/redpacket"
)

// handleNow hands each relayed message straight to a handler; a service
// publishes to Kafka (casebook/kafka) and runs the handler in a consumer.
type handleNow outbox.Handler

func (h handleNow) Publish(ctx context.Context, msgs []outbox.Message) error {
	for _, m := range msgs {
		if err := h(ctx, m.Key, m.Value); err != nil {
			return err
		}
	}
	return nil
}

// Send a packet of ¥9 for 3, let three friends open it (one twice), record
// the claims in SQL, and refund what is left at expiry.
func Example() {
	ctx := context.Background()
	r, err := devstack.OpenRedis(ctx, os.Getenv(devstack.EnvRedisAddr))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	db, err := devstack.OpenSQL(ctx, os.Getenv(devstack.EnvMySQLDSN), "example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ns := "example:" + devstack.RandomHex(4)
	defer devstack.DeleteKeys(ctx, r.Client, ns+"*")

	now := time.Date(2026, 2, 17, 0, 0, 0, 0, time.UTC) // Spring Festival
	svc, _ := redpacket.New(r.Client, []*sqlx.DB{db.DB}, redpacket.Config{Namespace: ns, Now: func() time.Time { return now }})
	defer svc.Close()
	svc.Migrate(ctx)
	svc.Deposit(ctx, "grandma", 100_00)

	p, _ := svc.Send(ctx, redpacket.SendRequest{Sender: "grandma", RequestID: "cny-1", Total: 9_00, Count: 3, Kind: redpacket.Fixed})
	for _, who := range []string{"ann", "bo", "ann"} {
		fen, err := svc.Open(ctx, p.ID, who)
		fmt.Println(who, fen, err)
	}
	relay := outbox.NewRelay(r.Client, svc.Outboxes(), "claims", handleNow(svc.Handle))
	relay.DrainAll(ctx)

	now = now.Add(25 * time.Hour)
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
