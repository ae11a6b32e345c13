// Command seckill runs a flash sale: 1,000 units split over 8 buckets of a
// Redis Cluster, 20,000 concurrent buyers through the batcher, orders relayed
// through Kafka into the order block (SQL), nine in ten paid through a
// gateway callback, and the unpaid ones released.
//
//	go run ./examples/seckill
//
// Embedded defaults: a spawned Redis Cluster (one embedded Redis without the
// redis-server binary), franz-go's in-process kfake Kafka, SQLite. Real
// servers: CASEBOOK_REDIS_CLUSTER or CASEBOOK_REDIS_ADDR,
// CASEBOOK_KAFKA_BROKERS, CASEBOOK_MYSQL_DSN.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/order"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/seckill"
)

func main() { devstack.Run(run) }

func run(ctx context.Context) error {
	st, err := devstack.Open(ctx, devstack.FromEnv(), "casebook_seckill", os.Stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	r, k, sqlb := st.Redis, st.Kafka, st.SQL

	ns := "casebook-example-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	defer devstack.DeleteKeys(context.WithoutCancel(ctx), r.Client, ns+"*")
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	// Reservation ids come from a snowflake node: give every process its
	// own node id, and a checkpoint so that a restart with a clock that went
	// back cannot repeat ids.
	ids, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 1, Checkpoint: idgen.NewRedisCheckpoint(r.Client, ns+":snowflake:1")})
	if err != nil {
		return err
	}
	orders, err := order.New(r.Client, []*sqlx.DB{sqlb.DB}, order.Config{Namespace: ns, Now: clock})
	if err != nil {
		return err
	}
	defer orders.Close()
	if err := orders.Migrate(ctx); err != nil {
		return err
	}
	svc, err := seckill.New(r.Client, sqlb.DB, orders, seckill.Config{Namespace: ns, Now: clock, IDs: ids})
	if err != nil {
		return err
	}
	if err := svc.Migrate(ctx); err != nil {
		return err
	}
	_, err = svc.Create(ctx, seckill.Campaign{ID: "double11", SKU: "phone-128g-" + ns[len(ns)-6:], Price: 399900, Stock: 1000, Limit: 1, Buckets: 8,
		Starts: clock().Add(-time.Second), Ends: clock().Add(time.Hour)})
	if err != nil {
		return err
	}
	sale, err := svc.Open(ctx, "double11") // what any other process does: the rules come from SQL
	if err != nil {
		return err
	}

	b := sale.NewBatcher(seckill.BatchConfig{})
	var won, soldOut, limited atomic.Int64
	var mu sync.Mutex
	var reservations [][2]string // user, reservation id
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 20_000 {
		wg.Go(func() {
			user := "user-" + strconv.Itoa(i%15_000) // some users try twice
			id, err := b.Buy(ctx, user, 1)
			switch {
			case err == nil:
				won.Add(1)
				mu.Lock()
				reservations = append(reservations, [2]string{user, id})
				mu.Unlock()
			case errors.Is(err, seckill.ErrSoldOut):
				soldOut.Add(1)
			case errors.Is(err, seckill.ErrLimitReached):
				limited.Add(1)
			default:
				log.Print(err)
			}
		})
	}
	wg.Wait()
	b.Close()
	fmt.Printf("20,000 buyers in %v: %d won, %d sold out, %d over the limit (%s Redis, %d node(s))\n",
		time.Since(start).Round(time.Millisecond), won.Load(), soldOut.Load(), limited.Load(), r.Kind, len(r.Addrs))

	topic := "seckill-orders-" + ns
	if err := kafka.CreateTopic(k.Brokers, topic, 8); err != nil {
		return err
	}
	prod, err := kafka.Dial(k.Brokers, "seckill-relay")
	if err != nil {
		return err
	}
	defer prod.Close()
	relay := outbox.NewRelay(r.Client, sale.Outboxes(), topic, prod)
	entries, err := relay.DrainAll(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = kafka.ConsumeN(cctx, k.Brokers, "orders", []string{topic}, int64(entries), svc.HandleOrder, kafka.ConsumerConfig{})
	cancel()
	if err != nil {
		return err
	}

	paid := 0
	for i, res := range reservations {
		if i%10 == 0 { // nine in ten pay
			continue
		}
		o, err := svc.OrderOf(ctx, res[0], res[1])
		if err != nil {
			return err
		}
		p, err := orders.StartPayment(ctx, o.ID, "wechat")
		if err != nil {
			return err
		}
		// The gateway's callback (examples/shop runs a real, signing one).
		out, err := orders.HandleCallback(ctx, order.Callback{PayNo: p.PayNo, GatewayTxn: "wx-" + strconv.FormatInt(p.PayNo, 36),
			Amount: p.Amount, Currency: p.Currency, Success: true, PaidAt: clock()})
		if err != nil || out != order.OutcomePaid {
			return fmt.Errorf("pay %s: %s, %v", res[1], out, err)
		}
		paid++
	}
	now.Add(int64(16 * time.Minute)) // the others miss the 15-minute deadline
	released, err := sale.ReleaseDue(ctx)
	if err != nil {
		return err
	}
	rep, err := sale.Reconcile(ctx, false)
	if err != nil {
		return err
	}
	fmt.Printf("orders: %d batches through Kafka (%s) into %s; %d paid, %d released after 15 min\n", entries, k.Kind, sqlb.Kind, paid, released)
	fmt.Printf("stock left: Redis %d, SQL %d, drift %d\n", rep.RedisStock, rep.SQLStock, rep.Drift)
	if !rep.OK() {
		return fmt.Errorf("seckill example: Redis and SQL disagree: %+v", rep)
	}
	return nil
}
