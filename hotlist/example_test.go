package hotlist_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/hotlist"
)

// Events are batched per partition as a producer sends them to Kafka; each
// partition's claim aggregates its messages and flushes them into Redis (the
// hotkafka package does this for a consumer group); a publisher stores the
// top and readers serve it from memory. An hour later — one half-life —
// every heat has halved, and nothing had to run to make it so.
func Example() {
	ctx := context.Background()
	r, err := devstack.OpenRedis(ctx, os.Getenv(devstack.EnvRedisAddr)) // your redis.UniversalClient in a service
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	ns := "example:" + devstack.RandomHex(4)
	defer devstack.DeleteKeys(ctx, r.Client, ns+"*")

	// The services' clock, moved by the example (atomic: they read it from
	// their own goroutines too).
	var now atomic.Int64
	now.Store(time.Now().Truncate(time.Hour).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	list, err := hotlist.New(r.Client, hotlist.Config{Name: "weibo", Namespace: ns, Partitions: 4, Now: clock})
	if err != nil {
		fmt.Println(err)
		return
	}
	var events []hotlist.Event
	add := func(item string, kind hotlist.Kind, n int) {
		for range n {
			events = append(events, hotlist.Event{Item: item, Kind: kind, At: clock()})
		}
	}
	add("post:a", hotlist.Comment, 1) // 13.5
	add("post:b", hotlist.Repost, 3)  // 3
	add("post:b", hotlist.Like, 10)   // + 5
	add("post:c", hotlist.View, 1000) // 5
	add("post:c", hotlist.Like, 1)    // + 0.5
	add("post:d", hotlist.Repost, 2)  // 2
	msgs, _ := hotlist.EncodeMessages("post-events", 4, 0, events)

	agg, _ := hotlist.NewAggregator(list, hotlist.AggregatorConfig{})
	claims := map[int32]*hotlist.Claim{}
	offsets := map[int32]int64{} // Kafka numbers each partition's messages
	for _, m := range msgs {
		p := hotlist.PartitionOf(m.Key, 4)
		if claims[p] == nil {
			claims[p], _ = agg.Claim(ctx, p)
		}
		claims[p].Add(offsets[p], m.Value)
		offsets[p]++
	}
	for _, c := range claims {
		if err := c.Release(ctx); err != nil { // flushes
			fmt.Println(err)
			return
		}
	}

	if _, err := list.Publish(ctx); err != nil {
		fmt.Println(err)
		return
	}
	top, _ := list.TopCached(ctx, 3)
	for _, e := range top {
		fmt.Printf("#%d %s %.1f\n", e.Rank, e.Item, e.Heat)
	}
	now.Add(int64(time.Hour))
	later, _ := list.Top(ctx, 1)
	fmt.Printf("an hour later: %s %.2f\n", later[0].Item, later[0].Heat)
	// Output:
	// #1 post:a 13.5
	// #2 post:b 8.0
	// #3 post:c 5.5
	// an hour later: post:a 6.75
}
