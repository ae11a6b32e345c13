package main

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/devcore"
	"github.com/casebook-dev/casebook/order"
)

// orderCreate measures orders created on 8 databases × 8 tables (each: the
// order row, its event, a TCC reservation, the reserved mark), coalesced
// into CreateBatch calls of up to 200 the way a Kafka consumer hands over a
// batch of messages: many callers wait, two flushers write.
func orderCreate() Measurement {
	return Measurement{Name: "order.create", Unit: "orders (batched, 8 × 8 tables)", SQLBound: true, Tier: TierMySQL, Setup: func(ctx context.Context, env *Env) (Prepared, error) {
		r, sqls, _, svc, ns, err := env.orderService(ctx, "bench-order-")
		if err != nil {
			return Prepared{}, err
		}
		for i := range 64 {
			if err := svc.PutSKU(ctx, "sku"+strconv.Itoa(i), 100, 1<<39); err != nil {
				return Prepared{}, err
			}
		}
		type req struct {
			n    order.NewOrder
			done chan error
		}
		queue := make(chan req, 1024)
		stop := make(chan struct{})
		flush := func() {
			for {
				var batch []req
				select {
				case r := <-queue:
					batch = append(batch, r)
				case <-stop:
					return
				}
				timeout := time.After(2 * time.Millisecond)
			fill:
				for len(batch) < 200 {
					select {
					case r := <-queue:
						batch = append(batch, r)
					case <-timeout:
						break fill
					}
				}
				reqs := make([]order.NewOrder, len(batch))
				for i, r := range batch {
					reqs[i] = r.n
				}
				for i, res := range svc.CreateBatch(ctx, reqs) {
					batch[i].done <- res.Err
				}
			}
		}
		for range 2 {
			go flush()
		}
		var seq atomic.Int64
		return Prepared{
			Workers: 512,
			Backend: describeSQL(sqls[0].Kind) + " × 8",
			Op: func() error {
				n := seq.Add(1)
				done := make(chan error, 1)
				queue <- req{order.NewOrder{User: "u" + strconv.FormatInt(n, 36), RequestID: "r", Lines: []order.Line{{SKU: "sku" + strconv.FormatInt(n%64, 10), Qty: 1}}}, done}
				return <-done
			},
			Cleanup: func() {
				close(stop)
				svc.Close()
				devcore.DeleteKeys(context.WithoutCancel(ctx), r.Client, ns+"*")
			},
		}, nil
	}}
}

// orderService opens an order.Service on env's Redis and 8 databases under a
// fresh namespace (prefix + random), its tables migrated: what the order
// measurements write through. The caller closes it and deletes ns's keys.
func (e *Env) orderService(ctx context.Context, prefix string) (*devcore.Redis, []*devcore.SQL, []*sqlx.DB, *order.Service, string, error) {
	r, err := e.Redis(ctx)
	if err != nil {
		return nil, nil, nil, nil, "", err
	}
	sqls, err := e.SQLs(ctx)
	if err != nil {
		return nil, nil, nil, nil, "", err
	}
	dbs := make([]*sqlx.DB, len(sqls))
	for i, s := range sqls {
		dbs[i] = s.DB
	}
	ns := prefix + devcore.RandomHex(3)
	svc, err := order.New(r.Client, dbs, order.Config{Namespace: ns})
	if err == nil {
		if err = svc.Migrate(ctx); err != nil {
			svc.Close()
		}
	}
	return r, sqls, dbs, svc, ns, err
}
