// Command rank runs a sharded leaderboard on a Redis Cluster: 64 sorted sets
// spread over the cluster's slots, 100,000 players, exact global ranks.
//
//	go run ./examples/rank                                    # spawns a local cluster
//	CASEBOOK_REDIS_CLUSTER=127.0.0.1:7000 go run ./examples/rank
//	CASEBOOK_REDIS_ADDR=127.0.0.1:6379 go run ./examples/rank  # one Redis
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/rank"
)

func main() {
	players := flag.Int("players", 100_000, "players to seed")
	flag.Parse()
	devstack.Run(func(ctx context.Context) error { return run(ctx, *players) })
}

func run(ctx context.Context, players int) error {
	st, err := devstack.Open(ctx, devstack.FromEnv(), "casebook_rank", os.Stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	r := st.Redis
	ns := "casebook-example-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	board, err := rank.New(r.Client, rank.Config{Name: "arena", Namespace: ns, Shards: 64})
	if err != nil {
		return err
	}
	defer devstack.DeleteKeys(context.WithoutCancel(ctx), r.Client, ns+"*") // leave nothing behind on a real server
	fmt.Printf("board %q: %d shards, %s Redis, %d node(s) from %s\n", "arena", len(board.Keys()), r.Kind, len(r.Addrs), r.Addrs[0])

	start := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	ups := make([]rank.Update, 0, 1000)
	for i := range players {
		ups = append(ups, rank.Update{Member: "player-" + strconv.Itoa(i), Mode: rank.Increment, Value: rng.Int64N(100_000)})
		if len(ups) == cap(ups) || i == players-1 {
			if _, err := board.Apply(ctx, ups); err != nil {
				return err
			}
			ups = ups[:0]
		}
	}
	fmt.Printf("seeded %d players in %v (batched, pipelined)\n", players, time.Since(start).Round(time.Millisecond))

	top, err := board.Top(ctx, 5)
	if err != nil {
		return err
	}
	fmt.Println("top 5:")
	for _, e := range top {
		fmt.Printf("  #%d %-14s %6d\n", e.Rank, e.Member, e.Score)
	}
	me := "player-4242"
	if _, err := board.Add(ctx, me, 50_000); err != nil {
		return err
	}
	around, err := board.Around(ctx, me, 2)
	if err != nil {
		return err
	}
	fmt.Printf("around %s after +50000:\n", me)
	for _, e := range around {
		fmt.Printf("  #%d %-14s %6d\n", e.Rank, e.Member, e.Score)
	}
	return nil
}
