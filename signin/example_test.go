package signin_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/signin"
)

// handleNow is an outbox.Publisher that hands each message straight to a
// handler; a service publishes to Kafka instead (casebook/kafka) and runs the
// handler in a consumer.
type handleNow outbox.Handler

func (h handleNow) Publish(ctx context.Context, msgs []outbox.Message) error {
	for _, m := range msgs {
		if err := h(ctx, m.Key, m.Value); err != nil {
			return err
		}
	}
	return nil
}

// Sign in on consecutive days, keep the streak, and grant the rewards once
// into the SQL ledger.
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

	svc, _ := signin.New(r.Client, signin.Config{Namespace: ns, BonusEvery: 3})
	ledger, _ := signin.NewLedger(db.DB)
	ledger.Migrate(ctx)

	day := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	for i := range 3 {
		res, _ := svc.Sign(ctx, "ann", day.AddDate(0, 0, i))
		fmt.Printf("%s: streak %d, +%d points\n", res.Date, res.Streak, res.Points)
	}
	again, _ := svc.Sign(ctx, "ann", day.AddDate(0, 0, 2))
	fmt.Println("signed twice on one day:", again.AlreadySigned)

	relay := outbox.NewRelay(r.Client, svc.Outboxes(), "rewards", handleNow(ledger.Handle))
	relay.DrainAll(ctx)
	relay.DrainAll(ctx) // nothing left to send twice
	points, _ := ledger.Balance(ctx, "ann")
	fmt.Println("ann's points:", points)
	// Output:
	// 2026-11-28: streak 1, +10 points
	// 2026-11-29: streak 2, +10 points
	// 2026-11-30: streak 3, +110 points
	// signed twice on one day: true
	// ann's points: 130
}
