package main

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/devcore"
	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/seckill"
)

// seckillBuy measures purchase decisions on a campaign that never sells out:
// one script call per buyer, or through the batcher with many buyers.
func seckillBuy(name string, batched bool) Measurement {
	unit, workers := "decisions (one call per buyer)", redisWorkers
	if batched {
		unit, workers = "decisions (through the batcher; each worker a buyer waiting)", 512
	}
	return onRedis(name, unit, workers, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		sale, err := benchSale(ctx, env, r, ns, 1<<40, seckill.Config{})
		if err != nil {
			return nil, err
		}
		var n atomic.Int64
		if !batched {
			return func() error {
				_, err := sale.Buy(ctx, "u"+strconv.FormatInt(n.Add(1), 10), 1)
				return err
			}, nil
		}
		b := sale.NewBatcher(seckill.BatchConfig{})
		env.Fixture("batcher:"+ns, func() (any, func(), error) { return b, func() { b.Close() }, nil }) // closed at the end
		return func() error {
			_, err := b.Buy(ctx, "u"+strconv.FormatInt(n.Add(1), 10), 1)
			return err
		}, nil
	})
}

// benchSale opens a one-bucket campaign of stock units on r, its orders in
// the order block on env's SQL (closed at the end with the Env).
func benchSale(ctx context.Context, env *Env, r *devcore.Redis, ns string, stock int64, cfg seckill.Config) (*seckill.Sale, error) {
	sqlb, err := env.SQL(ctx)
	if err != nil {
		return nil, err
	}
	ids, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 1})
	if err != nil {
		return nil, err
	}
	orders, err := order.New(r.Client, []*sqlx.DB{sqlb.DB}, order.Config{Namespace: ns})
	if err != nil {
		return nil, err
	}
	env.Fixture("orders:"+ns, func() (any, func(), error) { return orders, func() { orders.Close(); ids.Close() }, nil })
	if err := orders.Migrate(ctx); err != nil {
		return nil, err
	}
	cfg.Namespace, cfg.IDs = ns, ids
	s, err := seckill.New(r.Client, sqlb.DB, orders, cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		return nil, err
	}
	return s.Create(ctx, seckill.Campaign{ID: "bench-" + ns[len(ns)-6:], SKU: "bench-" + ns[len(ns)-6:], Price: 1, Stock: stock, Limit: 1 << 40, Buckets: 1,
		Starts: time.Now().Add(-time.Minute), Ends: time.Now().Add(time.Hour)})
}

func perSecond(n int) redis_rate.Limit { return redis_rate.PerSecond(n) }

func isSoldOut(err error) bool { return errors.Is(err, seckill.ErrSoldOut) }
