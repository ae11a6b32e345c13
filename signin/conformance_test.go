package signin_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/signin"
)

// Sign-in's invariants after each fault, once healed and the retries and
// the relay have run: every day a user signed is recorded once, the streak
// counts them all, and each reward is granted exactly once — 8 days of 10
// points and the 7th day's bonus of 100 for every user, 9 ledger rows each.
func TestConformanceFaults(t *testing.T) {
	type fault struct {
		name    string
		on, off time.Duration
		arm     func(p *testenv.Proxy)
	}
	redisFaults := []fault{
		{"redis replies lost", 20 * time.Millisecond, 20 * time.Millisecond, func(p *testenv.Proxy) { p.DropReplies(2) }},
		{"redis connections reset", 30 * time.Millisecond, 60 * time.Millisecond, (*testenv.Proxy).Reset},
	}
	for _, f := range redisFaults {
		t.Run(f.name, func(t *testing.T) {
			r, rp := testenv.NewFaultyRedis(t)
			db := testenv.NewSQL(t)
			failed := conformance(t, r, db, db, func(stop <-chan struct{}) { rp.Flap(stop, f.on, f.off, func() { f.arm(rp) }) })
			if rp.Cuts() == 0 && rp.Resets() == 0 && failed == 0 {
				t.Fatal("the fault was not exercised")
			}
		})
	}
	sqlFaults := []fault{
		{"ledger latency", time.Hour, 0, func(p *testenv.Proxy) { p.Latency(15*time.Millisecond, 10*time.Millisecond) }},
		{"ledger connections reset", 30 * time.Millisecond, 100 * time.Millisecond, (*testenv.Proxy).Reset},
		{"ledger commit replies lost", 40 * time.Millisecond, 40 * time.Millisecond, func(p *testenv.Proxy) { p.DropReplyTo("COMMIT", 2) }},
		{"ledger black hole", 300 * time.Millisecond, 200 * time.Millisecond, (*testenv.Proxy).BlackHole},
	}
	for _, f := range sqlFaults {
		t.Run(f.name, func(t *testing.T) {
			sqlf := testenv.NewFaultySQL(t, 1)
			failed := conformance(t, testenv.NewRedis(t), sqlf.DBs[0], sqlf.Direct[0], func(stop <-chan struct{}) { sqlf.Flap(stop, f.on, f.off, func() { f.arm(sqlf.Proxy) }) })
			if f.name != "ledger latency" && failed == 0 && sqlf.Cuts() == 0 && sqlf.Resets() == 0 {
				t.Fatal("the fault was not exercised")
			}
		})
	}
}

func conformance(t *testing.T, r *testenv.Redis, ledgerDB, direct *sqlx.DB, fault func(stop <-chan struct{})) (failed int64) {
	ctx := context.Background()
	rt := testenv.NewRetrier(t)
	again := func(what string, op func(ctx context.Context) error) { t.Helper(); rt.Do(what, op, nil) }
	clk := &testenv.Clock{}
	s := newService(t, r, clk, signin.Config{Buckets: 4})
	ledger, err := signin.NewLedger(ledgerDB)
	if err != nil {
		t.Fatal(err)
	}
	check, err := signin.NewLedger(direct)
	if err != nil {
		t.Fatal(err)
	}
	if err := check.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var faulting sync.WaitGroup
	faulting.Go(func() { fault(stop) })
	heal := sync.OnceFunc(func() { close(stop); faulting.Wait() })
	t.Cleanup(heal)

	tasks := &testenv.Published{}
	relay := outbox.NewRelay(r.Client, s.Outboxes(), "rewards", tasks)
	deliver := func() {
		again("relay", func(ctx context.Context) error { _, err := relay.DrainAll(ctx); return err })
		for _, m := range tasks.Take() {
			again("grant", func(ctx context.Context) error { return ledger.Handle(ctx, m.Key, m.Value) })
		}
	}
	const users, days = 12, 8
	first := day(y0, 11, 28)
	for d := range days {
		clk.Set(noon(first).AddDate(0, 0, d))
		var signing sync.WaitGroup
		for u := range users {
			signing.Go(func() {
				again("sign", func(ctx context.Context) error { _, err := s.Sign(ctx, fmt.Sprint("u", u), clk.Now()); return err })
			})
		}
		signing.Wait()
		deliver()
	}
	heal()
	deliver()
	if n, err := relay.Pending(ctx); err != nil || n != 0 {
		t.Fatalf("%d reward tasks pending after healing: %v", n, err)
	}
	last := day(y0, 12, 5)
	for u := range users {
		user := fmt.Sprint("u", u)
		hist, err := s.History(ctx, user, first, last)
		if err != nil || len(hist) != days {
			t.Fatalf("%s signed %d days (%v), want %d", user, len(hist), err, days)
		}
		if streak, err := s.Streak(ctx, user, clk.Now()); err != nil || streak != days {
			t.Fatalf("%s's streak %d (%v), want %d", user, streak, err, days)
		}
		bal, err := check.Balance(ctx, user)
		if err != nil || bal != days*10+100 {
			t.Fatalf("%s holds %d points (%v), want %d: every reward once", user, bal, err, days*10+100)
		}
		if n, err := check.Entries(ctx, user); err != nil || n != days+1 {
			t.Fatalf("%s has %d ledger rows (%v), want %d", user, n, err, days+1)
		}
	}
	return rt.Failed()
}
