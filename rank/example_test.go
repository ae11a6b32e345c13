package rank_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/rank"
)

// A board ranks by score and, at equal scores, by who got there first.
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

	now := time.Now()
	clock := func() time.Time { now = now.Add(time.Second); return now } // each write a second later
	board, err := rank.New(r.Client, rank.Config{Name: "arena", Namespace: ns, Shards: 4, Epoch: now.Add(-time.Hour), Now: clock})
	if err != nil {
		fmt.Println(err)
		return
	}
	board.Set(ctx, "alice", 300)
	board.Set(ctx, "bob", 500)
	board.Set(ctx, "carol", 300) // reaches 300 after alice
	board.Add(ctx, "dave", 120)

	top, _ := board.Top(ctx, 3)
	for _, e := range top {
		fmt.Printf("#%d %s %d\n", e.Rank, e.Member, e.Score)
	}
	me, _ := board.Rank(ctx, "dave")
	fmt.Printf("dave is #%d with %d\n", me.Rank, me.Score)
	// Output:
	// #1 bob 500
	// #2 alice 300
	// #3 carol 300
	// dave is #4 with 120
}

// A time trial: the lowest time wins, and equal times share a rank.
func Example_ascendingCompetition() {
	ctx := context.Background()
	r, err := devstack.OpenRedis(ctx, os.Getenv(devstack.EnvRedisAddr))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	ns := "example:" + devstack.RandomHex(4)
	defer devstack.DeleteKeys(ctx, r.Client, ns+"*")

	now := time.Now()
	clock := func() time.Time { now = now.Add(time.Second); return now } // each write a second later
	board, err := rank.New(r.Client, rank.Config{Name: "sprint", Namespace: ns, Shards: 4, Order: rank.Ascending, Ties: rank.Competition, Now: clock})
	if err != nil {
		fmt.Println(err)
		return
	}
	board.Best(ctx, "ann", 9_870) // ms
	board.Best(ctx, "bo", 9_580)
	board.Best(ctx, "cy", 9_870)
	board.Best(ctx, "ann", 10_200) // slower: her best stays
	board.Best(ctx, "di", 12_000)

	top, err := board.Top(ctx, 4)
	if err != nil {
		fmt.Println(err)
	}
	for _, e := range top {
		fmt.Printf("#%d %s %d\n", e.Rank, e.Member, e.Score)
	}
	// Output:
	// #1 bo 9580
	// #2 ann 9870
	// #2 cy 9870
	// #4 di 12000
}
