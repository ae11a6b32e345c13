package seckill_test

import (
	"context"
	"testing"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/seckill"
)

// TestPoisonOrderEventsDoNotBlock: malformed order events between good ones
// on one partition are skipped with a count by a real consumer group, and
// the events behind them still settle the gate (the cancelled unit back on
// sale, the paid reservation closed).
func TestPoisonOrderEventsDoNotBlock(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), 4, 1, 2, seckill.Config{})
	f.payOneCancelOne(ctx)
	events := &collect{}
	if _, err := f.orders.RelayOutbox(ctx, events, "order-events", 10_000); err != nil || len(events.values) < 4 {
		t.Fatalf("%d order events: %v", len(events.values), err)
	}
	poison := []string{
		`{"v":1}`,
		`not json`,
		`{"v":2,"id":"o1-v2","kind":"status","order":1,"user":"u","from":"pending","to":"paid","version":2,"amount":5,"at":1}`,
		`{"v":1,"id":"o1-v2","kind":"status","order":1,"user":"u","from":"pending","to":"paid","version":2,"amount":5,"at":1,"x":1}`,
		`{"v":1,"id":"o1-v2","kind":"status","order":1,"user":"u","from":"pending","to":"paid","version":2,"amount":5,"at":1}]`,
		`null`,
	}
	half := len(events.values) / 2
	values := append([][]byte{}, events.values[:half]...)
	for _, p := range poison {
		values = append(values, []byte(p))
	}
	values = append(values, events.values[half:]...)
	c, bad := testenv.ConsumeInOrder(t, values, f.s.HandleOrderEvent, order.ErrBadEvent)
	if c.Poisoned() != int64(len(poison)) || bad != len(poison) || c.Handled() != int64(len(events.values)) {
		t.Fatalf("poisoned %d (%d ErrBadEvent), handled %d; want %d poisoned, %d handled", c.Poisoned(), bad, c.Handled(), len(poison), len(events.values))
	}
	if left, _ := f.sl.RedisStock(ctx); left != 3 || f.open(ctx) != 0 {
		t.Fatalf("Redis stock %d, %d reservations open; want 3 and none: the events behind the poison did not settle", left, f.open(ctx))
	}
}
