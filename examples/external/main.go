// Command checkin-service is a service in its own module that uses casebook
// only through its exported API — what a team that runs `go get
// github.com/casebook-dev/casebook` can do. It wires its own clients (go-redis,
// sqlx with the driver it chose, sarama) into two blocks and runs each to
// the end of its flow:
//
//   - signin: sign-ins → outbox streams → Kafka → the reward ledger in SQL;
//   - seckill: purchases → outbox streams → Kafka → orders in SQL.
//
// It builds in CI (go build in this directory) and runs against the
// servers CASEBOOK_REDIS_ADDR, CASEBOOK_MYSQL_DSN and CASEBOOK_KAFKA_BROKERS
// name, or embedded ones.
//
//	cd examples/external && go run .
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	_ "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/signin"
)

func main() { devstack.Run(run) }

func run(ctx context.Context) error {
	// In production these are the service's own clients; devstack stands in
	// with embedded servers when nothing is named.
	st, err := devstack.Open(ctx, devstack.FromEnv(), "checkin_service", os.Stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	var rdb redis.UniversalClient = st.Redis.Client
	var db *sqlx.DB = st.SQL.DB
	producer, err := sarama.NewSyncProducer(st.Kafka.Brokers, kafka.Config("checkin-service"))
	if err != nil {
		return err
	}
	defer producer.Close()
	ns := "checkin-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	defer devstack.DeleteKeys(context.WithoutCancel(ctx), rdb, ns+"*")

	if err := signinFlow(ctx, rdb, db, st.Kafka.Brokers, kafka.NewPublisher(producer), ns); err != nil {
		return fmt.Errorf("signin: %w", err)
	}
	if err := seckillFlow(ctx, rdb, db, st.Kafka.Brokers, kafka.NewPublisher(producer), ns); err != nil {
		return fmt.Errorf("seckill: %w", err)
	}
	return nil
}

func signinFlow(ctx context.Context, rdb redis.UniversalClient, db *sqlx.DB, brokers []string, pub outbox.Publisher, ns string) error {
	svc, err := signin.New(rdb, signin.Config{Namespace: ns + ":signin", BonusEvery: 3})
	if err != nil {
		return err
	}
	ledger, err := signin.NewLedger(db)
	if err != nil {
		return err
	}
	if err := ledger.Migrate(ctx); err != nil {
		return err
	}
	day := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	for i := range 3 {
		if _, err := svc.Sign(ctx, "ann", day.AddDate(0, 0, i)); err != nil {
			return err
		}
	}
	topic := ns + ".rewards"
	if err := kafka.CreateTopic(brokers, topic, 4); err != nil {
		return err
	}
	relayed, err := outbox.NewRelay(rdb, svc.Outboxes(), topic, pub).DrainAll(ctx)
	if err != nil {
		return err
	}
	if _, err := kafka.ConsumeN(ctx, brokers, ns+"-ledger", []string{topic}, int64(relayed), ledger.Handle, kafka.ConsumerConfig{}); err != nil {
		return err
	}
	points, err := ledger.Balance(ctx, "ann")
	if err != nil {
		return err
	}
	fmt.Printf("signin: 3 days signed, %d rewards relayed through Kafka, ann has %d points\n", relayed, points)
	if points != 130 {
		return fmt.Errorf("ann has %d points, want 130", points)
	}
	return nil
}
