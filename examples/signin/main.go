// Command signin runs a month of daily check-ins for a few users on a Redis
// Cluster, relays the rewards through Kafka and grants them into SQL.
//
//	go run ./examples/signin
//
// Embedded defaults: a spawned Redis Cluster (one embedded Redis without the
// redis-server binary), franz-go's in-process kfake Kafka, SQLite.
package main

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/signin"
)

func main() {
	ctx := context.Background()
	st, err := devstack.OpenStack(ctx, "casebook_signin", os.Stderr)
	check(err)
	defer st.Close()
	r, k, sqlb := st.Redis, st.Kafka, st.SQL

	ns := "casebook-example-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	defer devstack.DeleteKeys(ctx, r.Client, ns+"*")
	shanghai, _ := time.LoadLocation("Asia/Shanghai")
	svc, err := signin.New(r.Client, signin.Config{Namespace: ns, Location: shanghai})
	check(err)
	ledger, err := signin.NewLedger(sqlb.DB)
	check(err)
	check(ledger.Migrate(ctx))

	users := []string{"ann", "bo", "cy"}
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Date(2026, 11, 1, 8, 0, 0, 0, shanghai)
	for d := range 30 {
		for _, u := range users {
			if u == "cy" && rng.IntN(3) == 0 {
				continue // cy forgets now and then
			}
			res, err := svc.Sign(ctx, u, start.AddDate(0, 0, d))
			check(err)
			if res.Points > 10 {
				fmt.Printf("%s %s: streak %d, bonus! +%d\n", res.Date, u, res.Streak, res.Points)
			}
		}
	}

	topic := "signin-rewards-" + ns
	check(kafka.CreateTopic(k.Brokers, topic, 8))
	prod, err := kafka.Dial(k.Brokers, "signin-relay")
	check(err)
	defer prod.Close()
	relay := outbox.NewRelay(r.Client, svc.Outboxes(), topic, prod)
	relayed, err := relay.DrainAll(ctx)
	check(err)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = kafka.ConsumeN(cctx, k.Brokers, "ledger", []string{topic}, int64(relayed), ledger.Handle, kafka.ConsumerConfig{})
	check(err)
	fmt.Printf("relayed %d reward tasks through Kafka (%s) into %s\n", relayed, k.Kind, sqlb.Kind)
	for _, u := range users {
		bal, err := ledger.Balance(ctx, u)
		check(err)
		days, _ := svc.MonthCount(ctx, u, 2026, time.November)
		streak, _ := svc.Streak(ctx, u, start.AddDate(0, 0, 29))
		fmt.Printf("%-4s signed %2d days in November, streak %2d, %4d points\n", u, days, streak, bal)
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
