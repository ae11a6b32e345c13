package signin_test

import (
	"context"
	"fmt"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/signin"
)

// Sign in on consecutive days, keep the streak, and grant the rewards once
// into the SQL ledger.
func Example() {
	ctx := context.Background()
	sc, err := devstack.OpenScratch(ctx, "example") // a service passes its own clients
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sc.Close()

	svc, _ := signin.New(sc.Redis, signin.Config{Namespace: sc.Namespace, BonusEvery: 3})
	ledger, _ := signin.NewLedger(sc.SQL)
	ledger.Migrate(ctx)

	day := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	for i := range 3 {
		res, _ := svc.Sign(ctx, "ann", day.AddDate(0, 0, i))
		fmt.Printf("%s: streak %d, +%d points\n", res.Date, res.Streak, res.Points)
	}
	again, _ := svc.Sign(ctx, "ann", day.AddDate(0, 0, 2))
	fmt.Println("signed twice on one day:", again.AlreadySigned)

	relay := outbox.NewRelay(sc.Redis, svc.Outboxes(), "rewards", outbox.Direct(ledger.Handle))
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
