package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/seckill"
)

// batchBuy has users buy one unit each through a batcher that waits long
// enough for all of them to share one call, and returns their ids; users
// that got an error are missing from the map (errs has their errors).
func batchBuy(t *testing.T, f *fixture, users ...string) (ids map[string]string, errs map[string]error) {
	t.Helper()
	b := f.sl.NewBatcher(seckill.BatchConfig{Linger: 200 * time.Millisecond, MaxBatch: len(users)})
	defer b.Close()
	ids, errs = map[string]string{}, map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, u := range users {
		wg.Go(func() {
			id, err := b.Buy(context.Background(), u, 1)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[u] = err
			} else {
				ids[u] = id
			}
		})
	}
	wg.Wait()
	return ids, errs
}

// sameBatch fails the test unless every id is a slot of one batch record.
// paidBatch buys for users (the first is "pays") in one batch, records
// their orders and pays the first.
func paidBatch(t *testing.T, f *fixture, users ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	ids, errs := batchBuy(t, f, users...)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	sameBatch(t, f, ids)
	f.record(ctx)
	if err := f.pay(ctx, users[0], ids[users[0]]); err != nil {
		t.Fatal(err)
	}
	return ids
}

func sameBatch(t *testing.T, f *fixture, ids map[string]string) {
	t.Helper()
	fields := map[string]bool{}
	for _, id := range ids {
		_, field, err := seckill.RecordOf(f.sl, id)
		if err != nil {
			t.Fatal(err)
		}
		fields[field] = true
	}
	if len(fields) != 1 {
		t.Fatalf("ids %v in %d batches, want one", ids, len(fields))
	}
}

// One batch of four reservations: one is paid, one cancelled (its order
// event closes that slot at once: unit and quota back), and the other two
// stay open until their shared deadline, when ReleaseDue returns exactly
// them. Closing a slot never touches its neighbours.
func TestBatchSlotsCloseOneByOne(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 10, 1, 1, seckill.Config{})
	ids := paidBatch(t, f, "pays", "cancels", "waits1", "waits2")
	o, err := f.s.OrderOf(ctx, "cancels", ids["cancels"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.orders.CancelOrder(ctx, o.ID, order.ReasonUserCancel); err != nil {
		t.Fatal(err)
	}
	f.events(ctx)
	if open := f.open(ctx); open != 2 {
		t.Fatalf("%d reservations open after one payment and one cancel of four, want 2", open)
	}
	if left, err := f.sl.RedisStock(ctx); left != 7 || err != nil {
		t.Fatalf("Redis stock %d (%v), want 7: the cancelled unit back", left, err)
	}
	if n, err := f.sl.ReleaseDue(ctx); n != 0 || err != nil {
		t.Fatalf("released %d before the deadline (%v)", n, err)
	}
	f.clk.Add(16 * time.Minute)
	if n, err := f.sl.ReleaseDue(ctx); n != 2 || err != nil {
		t.Fatalf("released %d at the deadline (%v), want the 2 unpaid", n, err)
	}
	if n, err := f.sl.ReleaseDue(ctx); n != 0 || err != nil {
		t.Fatalf("released %d more on the next pass (%v)", n, err)
	}
	if open := f.open(ctx); open != 0 {
		t.Fatalf("%d reservations open after the release", open)
	}
	if left, err := f.sl.RedisStock(ctx); left != 9 || err != nil {
		t.Fatalf("Redis stock %d (%v), want 9: all but the paid unit", left, err)
	}
	for _, u := range []string{"cancels", "waits1", "waits2"} {
		if _, err := f.sl.Buy(ctx, u, 1); err != nil {
			t.Errorf("%s's quota did not come back: %v", u, err)
		}
	}
	if _, err := f.sl.Buy(ctx, "pays", 1); !errors.Is(err, seckill.ErrLimitReached) {
		t.Errorf("the payer bought again: %v", err)
	}
	rep, err := f.sl.Reconcile(ctx, false)
	if err != nil || !rep.OK() {
		t.Fatalf("after the batch settled: %+v, %v", rep, err)
	}
}

// A batch whose reply is lost is sent again by go-redis and answers as the
// first call did — reserved, or over the limit for the same user twice — and
// changes nothing more: one reservation each, one order each, the stock
// taken once.
func TestRetriedBatchAnswersAsTheFirst(t *testing.T) {
	ctx := context.Background()
	f, p := lossy(t, 3, 1, 1)
	p.DropReplyTo("victim", 1)
	ids, errs := batchBuy(t, f, "victim", "victim", "a", "b")
	if p.Cuts() != 1 {
		t.Fatalf("%d replies lost, want 1", p.Cuts())
	}
	if len(ids) != 3 {
		t.Fatalf("reserved %v, want the victim, a and b", ids)
	}
	sameBatch(t, f, ids)
	if len(errs) != 1 || !errors.Is(errs["victim"], seckill.ErrLimitReached) {
		t.Fatalf("%v: want the victim's second unit over the limit", errs)
	}
	if left, err := f.sl.RedisStock(ctx); left != 0 || err != nil {
		t.Fatalf("Redis stock %d (%v), want 0", left, err)
	}
	if open := f.open(ctx); open != 3 {
		t.Fatalf("%d reservations open, want 3", open)
	}
	orders := 0
	for _, v := range f.drain(ctx) {
		m, err := seckill.DecodeOrderMessage(v)
		if err != nil {
			t.Fatal(err)
		}
		orders += len(m.Orders)
	}
	if orders != 3 {
		t.Fatalf("%d orders in the outbox, want 3", orders)
	}
}

// Redis loses a batch's record (a failover) after its orders were recorded
// and one was paid: Reconcile reports the unpaid ones missing and rebuilds
// them from SQL as one record again, each slot then settled on its own.
func TestReconcileRebuildsBatchRecords(t *testing.T) {
	ctx := context.Background()
	logs := obstest.NewLogs()
	f := setup(t, testenv.NewRedis(t), 10, 1, 1, seckill.Config{Logger: logs.Logger})
	ids := paidBatch(t, f, "pays", "u1", "u2", "u3")
	key, field, err := seckill.RecordOf(f.sl, ids["u1"])
	if err != nil {
		t.Fatal(err)
	}
	if err := f.r.Client.HDel(ctx, key, field).Err(); err != nil {
		t.Fatal(err)
	}
	found, err := f.sl.Reconcile(ctx, false)
	if err != nil || found.Missing != 3 || found.Repaired {
		t.Fatalf("check: %+v, %v; want 3 missing, not repaired", found, err)
	}
	rep, err := f.sl.Reconcile(ctx, true)
	if err != nil || rep.Missing != 3 || !rep.Repaired {
		t.Fatalf("repair: %+v, %v; want 3 missing, repaired", rep, err)
	}
	if lines, want := logs.Lines(), []string{
		fmt.Sprintf("WARN seckill: reconcile found Redis and SQL apart casebook.block=seckill campaign=%s repair=false report=%v", f.sl.Campaign().ID, found),
		fmt.Sprintf("INFO seckill: reconcile rebuilt Redis from SQL casebook.block=seckill campaign=%s report=%v", f.sl.Campaign().ID, rep),
	}; fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("logged\n%q\nwant\n%q", lines, want)
	}
	if open := f.open(ctx); open != 3 {
		t.Fatalf("%d reservations open after the rebuild, want 3", open)
	}
	sameBatch(t, f, map[string]string{"u1": ids["u1"], "u2": ids["u2"], "u3": ids["u3"]})
	// One slot of the rebuilt record closes at once by its order's cancel.
	o, err := f.s.OrderOf(ctx, "u2", ids["u2"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.orders.CancelOrder(ctx, o.ID, order.ReasonUserCancel); err != nil {
		t.Fatal(err)
	}
	f.events(ctx)
	if open := f.open(ctx); open != 2 {
		t.Fatalf("%d reservations open after a cancel, want 2", open)
	}
	f.checkRebuilt(ctx, 10, 1)
}

// Closing a Batcher twice is harmless (it closed a closed channel, a
// panic, before); buys racing Close all return — decided, or
// ErrBatcherClosed — none left waiting for an answer nobody gives (a buy
// queued as the loops stopped waited forever before), and a buy after
// Close is ErrBatcherClosed.
func TestBatcherClose(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 1_000_000, 1, 4, seckill.Config{})
	for round := range 20 {
		b := f.sl.NewBatcher(seckill.BatchConfig{})
		var wg sync.WaitGroup
		done := make(chan struct{})
		for i := range 32 { // buyers until the batcher closes under them
			wg.Go(func() {
				for n := 0; ; n++ {
					_, err := b.Buy(ctx, fmt.Sprintf("u%d-%d-%d", round, i, n), 1)
					if errors.Is(err, seckill.ErrBatcherClosed) {
						return
					}
					if err != nil && !errors.Is(err, seckill.ErrSoldOut) {
						t.Errorf("a buy racing Close: %v", err)
						return
					}
				}
			})
		}
		go func() { wg.Wait(); close(done) }()
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		var c io.Closer = b
		for range 2 {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: buys racing Close never returned", round)
		}
		if _, err := b.Buy(ctx, "late", 1); !errors.Is(err, seckill.ErrBatcherClosed) {
			t.Fatalf("a buy after Close: %v", err)
		}
	}
}
