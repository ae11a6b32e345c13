package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/seckill"
)

// seckillFlow sells 10 units to 15 buyers, relays the purchases to Kafka
// and records them as orders in SQL through the order block, then checks
// Redis and SQL agree.
func seckillFlow(ctx context.Context, rdb redis.UniversalClient, db *sqlx.DB, brokers []string, pub outbox.Publisher, ns string) error {
	ids, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 7})
	if err != nil {
		return err
	}
	defer ids.Close()
	orders, err := order.New(rdb, []*sqlx.DB{db}, order.Config{Namespace: ns + ":order"})
	if err != nil {
		return err
	}
	defer orders.Close()
	if err := orders.Migrate(ctx); err != nil {
		return err
	}
	svc, err := seckill.New(rdb, db, orders, seckill.Config{Namespace: ns + ":seckill", IDs: ids})
	if err != nil {
		return err
	}
	if err := svc.Migrate(ctx); err != nil {
		return err
	}
	campaign := "flash-" + ns[len(ns)-6:]
	if _, err := svc.Create(ctx, seckill.Campaign{ID: campaign, SKU: "sku-" + campaign, Price: 100, Stock: 10, Limit: 1, Buckets: 2,
		Starts: time.Now().Add(-time.Minute), Ends: time.Now().Add(time.Hour)}); err != nil {
		return err
	}
	sale, err := svc.Open(ctx, campaign)
	if err != nil {
		return err
	}
	won := 0
	for i := range 15 {
		_, err := sale.Buy(ctx, "buyer-"+strconv.Itoa(i), 1)
		switch {
		case err == nil:
			won++
		case !errors.Is(err, seckill.ErrSoldOut):
			return err
		}
	}
	topic := ns + ".orders"
	if err := kafka.CreateTopic(brokers, topic, 4); err != nil {
		return err
	}
	relayed, err := outbox.NewRelay(rdb, sale.Outboxes(), topic, pub).DrainAll(ctx)
	if err != nil {
		return err
	}
	if _, err := kafka.ConsumeN(ctx, brokers, ns+"-orders", []string{topic}, int64(relayed), svc.HandleOrder, kafka.ConsumerConfig{}); err != nil {
		return err
	}
	rep, err := sale.Reconcile(ctx, false)
	if err != nil {
		return err
	}
	fmt.Printf("seckill: %d of 15 buyers won 10 units; %d order messages through Kafka; SQL stock %d, Redis stock %d, drift %d\n",
		won, relayed, rep.SQLStock, rep.RedisStock, rep.Drift)
	if won != 10 || !rep.OK() || rep.SQLStock != 0 {
		return fmt.Errorf("sale does not balance: %d won, %+v", won, rep)
	}
	return nil
}
