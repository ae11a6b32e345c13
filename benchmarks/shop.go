package main

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/devcore"
	"github.com/casebook-dev/casebook/seckill"
)

// seckillSoldOut measures what 99% of a flash sale's requests cost: a buy
// through the batcher, rate-limited entrance configured, after the last unit
// went — answered by the gate's local sold-out flag (Config.SoldOutFor), so
// by the app nodes, not Redis.
func seckillSoldOut() Measurement {
	m := onRedis("seckill.soldout", "sold-out answers (local flag, one process)", 512, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		sale, err := benchSale(ctx, env, r, ns, 1, seckill.Config{UserLimit: perSecond(1000), GlobalLimit: perSecond(10_000_000)})
		if err != nil {
			return nil, err
		}
		if _, err := sale.Buy(ctx, "first", 1); err != nil {
			return nil, err
		}
		b := sale.NewBatcher(seckill.BatchConfig{})
		env.Fixture("batcher:"+ns, func() (any, func(), error) { return b, func() { b.Close() }, nil })
		var n atomic.Int64
		return func() error {
			_, err := b.Buy(ctx, "u"+strconv.FormatInt(n.Add(1), 10), 1)
			if isSoldOut(err) {
				return nil
			}
			if err == nil {
				return errors.New("seckill.soldout: a buy succeeded on a sold-out campaign")
			}
			return err
		}, nil
	})
	m.Tier = TierApp
	return m
}

// seckillOrders measures the order consumer of a flash sale: order
// messages of 32 reservations (as the batcher writes them) handed to
// HandleOrder, which creates them through order.CreateBatch on 8 databases ×
// 8 tables — the writes the seed throttles to 2,000/s. Eight consumers, as
// eight partitions would have.
func seckillOrders() Measurement {
	return Measurement{Name: "seckill.orders", Unit: "orders written (messages of 32, 8 consumers, 8 × 8 tables)", SQLBound: true, Tier: TierMySQL,
		Setup: func(ctx context.Context, env *Env) (Prepared, error) {
			r, sqls, dbs, orders, ns, err := env.orderService(ctx, "bench-shop-")
			if err != nil {
				return Prepared{}, err
			}
			ids, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 2})
			if err != nil {
				return Prepared{}, err
			}
			gate, err := seckill.New(r.Client, dbs[0], orders, seckill.Config{Namespace: ns, IDs: ids})
			if err != nil {
				return Prepared{}, err
			}
			if err := gate.Migrate(ctx); err != nil {
				return Prepared{}, err
			}
			campaign := "bench-" + ns[len(ns)-6:]
			if _, err := gate.Create(ctx, seckill.Campaign{ID: campaign, SKU: campaign, Price: 100, Stock: 1 << 39, Limit: 1, Buckets: 8,
				Starts: time.Now().Add(-time.Minute), Ends: time.Now().Add(time.Hour)}); err != nil {
				return Prepared{}, err
			}
			const per = 32
			payBy := time.Now().Add(time.Hour)
			var seq atomic.Int64
			return Prepared{
				Workers: 8,
				Backend: describeSQL(sqls[0].Kind) + " × 8",
				Batch:   per,
				Op: func() error {
					m := seckill.OrderMessage{Campaign: campaign}
					for range per {
						n, _ := ids.Next(ctx)
						i := seq.Add(1)
						m.Orders = append(m.Orders, seckill.Order{ID: campaign + "-" + strconv.FormatInt(i%8, 10) + "-" + strconv.FormatInt(n, 10),
							User: "u" + strconv.FormatInt(i, 36), Qty: 1, PayBy: payBy})
					}
					return gate.HandleOrder(ctx, nil, seckill.EncodeOrderMessage(m))
				},
				Cleanup: func() {
					orders.Close()
					ids.Close()
					devcore.DeleteKeys(context.WithoutCancel(ctx), r.Client, ns+"*")
				},
			}, nil
		}}
}
