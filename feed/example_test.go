package feed_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/outbox"
)

// pushNow hands each fan-out chunk straight to a handler; a service
// publishes to Kafka (casebook/kafka) and runs HandleChunk in a consumer.
type pushNow outbox.Handler

func (h pushNow) Publish(ctx context.Context, msgs []outbox.Message) error {
	for _, m := range msgs {
		if err := h(ctx, m.Key, m.Value); err != nil {
			return err
		}
	}
	return nil
}

// Bob follows Alice, Alice posts three times, the posts are fanned out to
// Bob's inbox, and Bob reads his timeline two posts at a time.
func Example() {
	ctx := context.Background()
	r, err := devstack.OpenRedis(ctx, os.Getenv(devstack.EnvRedisAddr))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	db, err := devstack.OpenSQL(ctx, os.Getenv(devstack.EnvMySQLDSN), "example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ns := "example:" + devstack.RandomHex(4)
	defer devstack.DeleteKeys(ctx, r.Client, ns+"*")

	// The service's clock, moved by the example; atomic because the service
	// reads it from background goroutines too (the registry's refresh).
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	s, _ := feed.New(r.Client, []*sqlx.DB{db.DB}, feed.Config{Namespace: ns, TablesPerDB: 2, Now: func() time.Time { return time.Unix(0, now.Load()).UTC() }})
	defer s.Close()
	s.Migrate(ctx)

	s.Follow(ctx, "bob", "alice")
	s.Timeline(ctx, "bob", "", 10) // bob is active now: fan-out pushes to him
	for _, text := range []string{"first", "second", "third"} {
		now.Add(int64(time.Second))
		s.Publish(ctx, feed.PublishRequest{Author: "alice", RequestID: text, Body: text})
	}
	s.RelayFanout(ctx, pushNow(s.HandleChunk), "feed-chunks", 100)

	cursor := ""
	for {
		page, _ := s.Timeline(ctx, "bob", cursor, 2)
		for _, p := range page.Posts {
			fmt.Println(p.Author, p.Body)
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
		fmt.Println("-- next page")
	}
	// Output:
	// alice third
	// alice second
	// -- next page
	// alice first
}
