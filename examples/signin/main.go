// Command signin runs a month of daily check-ins for a few users on a Redis
// Cluster, relays the rewards through Kafka and grants them into SQL.
//
//	go run ./examples/signin
//
// Embedded defaults: a spawned Redis Cluster (one embedded Redis without the
// redis-server binary), franz-go's in-process kfake Kafka, SQLite. Real
// servers: CASEBOOK_REDIS_CLUSTER or CASEBOOK_REDIS_ADDR,
// CASEBOOK_KAFKA_BROKERS, CASEBOOK_MYSQL_DSN.
package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/signin"
)

func main() { devstack.Run(run) }

func run(ctx context.Context) error {
	st, err := devstack.Open(ctx, devstack.FromEnv(), "casebook_signin", os.Stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	r, k, sqlb := st.Redis, st.Kafka, st.SQL

	ns := "casebook-example-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	defer devstack.DeleteKeys(context.WithoutCancel(ctx), r.Client, ns+"*")
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		return err
	}
	svc, err := signin.New(r.Client, signin.Config{Namespace: ns, Location: shanghai})
	if err != nil {
		return err
	}
	ledger, err := signin.NewLedger(sqlb.DB)
	if err != nil {
		return err
	}
	if err := ledger.Migrate(ctx); err != nil {
		return err
	}

	users := []string{"ann", "bo", "cy"}
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Date(2026, 11, 1, 8, 0, 0, 0, shanghai)
	for d := range 30 {
		for _, u := range users {
			if u == "cy" && rng.IntN(3) == 0 {
				continue // cy forgets now and then
			}
			res, err := svc.Sign(ctx, u, start.AddDate(0, 0, d))
			if err != nil {
				return err
			}
			if res.Points > 10 {
				fmt.Printf("%s %s: streak %d, bonus! +%d\n", res.Date, u, res.Streak, res.Points)
			}
		}
	}

	// The reward path a service runs: outbox streams → relay → Kafka →
	// the ledger's consumer.
	topic := "signin-rewards-" + ns
	if err := kafka.CreateTopic(k.Brokers, topic, 8); err != nil {
		return err
	}
	pub, err := kafka.Dial(k.Brokers, "signin-relay")
	if err != nil {
		return err
	}
	defer pub.Close()
	relayed, err := outbox.NewRelay(r.Client, svc.Outboxes(), topic, pub).DrainAll(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	consumer, err := kafka.ConsumeN(cctx, k.Brokers, "ledger-"+ns, []string{topic}, int64(relayed), ledger.Handle, kafka.ConsumerConfig{})
	if err != nil {
		return err
	}
	fmt.Printf("relayed %d reward tasks through Kafka (%s) into %s; %d granted, %d poison\n",
		relayed, k.Kind, sqlb.Kind, consumer.Handled(), consumer.Poisoned())
	for _, u := range users {
		bal, err := ledger.Balance(ctx, u)
		if err != nil {
			return err
		}
		days, _ := svc.MonthCount(ctx, u, 2026, time.November)
		streak, _ := svc.Streak(ctx, u, start.AddDate(0, 0, 29))
		fmt.Printf("%-4s signed %2d days in November, streak %2d, %4d points\n", u, days, streak, bal)
	}
	return nil
}
