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

	today := time.Now()
	for i := range 3 { // the day before yesterday, yesterday, today
		res, _ := svc.Sign(ctx, "ann", today.AddDate(0, 0, i-2))
		fmt.Printf("day %d: streak %d, +%d points\n", i+1, res.Streak, res.Points)
	}
	again, _ := svc.Sign(ctx, "ann", today)
	fmt.Println("signed twice on one day:", again.AlreadySigned)

	relay := outbox.NewRelay(sc.Redis, svc.Outboxes(), "rewards", outbox.Direct(ledger.Handle))
	relay.DrainAll(ctx)
	relay.DrainAll(ctx) // nothing left to send twice
	points, _ := ledger.Balance(ctx, "ann")
	fmt.Println("ann's points:", points)
	// Output:
	// day 1: streak 1, +10 points
	// day 2: streak 2, +10 points
	// day 3: streak 3, +110 points
	// signed twice on one day: true
	// ann's points: 130
}

// A freeze held before a missed day covers it: the streak goes on, and the
// frozen day adds nothing to it.
func ExampleService_AddFreezes() {
	ctx := context.Background()
	sc, err := devstack.OpenScratch(ctx, "example-freezes")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sc.Close()

	now := time.Now().Add(-48 * time.Hour) // the day before yesterday
	svc, _ := signin.New(sc.Redis, signin.Config{Namespace: sc.Namespace, DayStart: 4 * time.Hour, Now: func() time.Time { return now }})
	svc.Sign(ctx, "ann", now)
	held, _ := svc.AddFreezes(ctx, "ann", 1, "welcome-gift")
	fmt.Println("freezes held:", held)

	now = now.Add(48 * time.Hour) // ann missed yesterday
	res, _ := svc.Sign(ctx, "ann", now)
	fmt.Printf("streak %d, %d day frozen\n", res.Streak, len(res.Frozen))
	st, _ := svc.Stats(ctx, "ann")
	fmt.Printf("%+v\n", st)
	// Output:
	// freezes held: 1
	// streak 2, 1 day frozen
	// {Current:2 Longest:2 Total:2 Freezes:0 FrozenDays:1}
}
