// Command rank runs a sharded leaderboard on a Redis Cluster: 64 sorted sets
// spread over the cluster's slots, 100,000 players, exact global ranks.
//
//	go run ./examples/rank                                  # spawns a local cluster
//	go run ./examples/rank -cluster 127.0.0.1:7000,127.0.0.1:7001
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/rank"
)

func main() {
	clusterArg := flag.String("cluster", os.Getenv("CASEBOOK_REDIS_CLUSTER"), "Redis Cluster nodes host:port,… (default: spawn a local cluster)")
	players := flag.Int("players", 100_000, "players to seed")
	flag.Parse()
	ctx := context.Background()

	r, err := devstack.OpenClusterOrStandalone(ctx, devstack.SplitList(*clusterArg), os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	ns := "casebook-example-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	board, err := rank.New(r.Client, rank.Config{Name: "arena", Namespace: ns, Shards: 64, Epoch: time.Now().Add(-time.Minute)})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { // leave nothing behind on a real cluster
		for _, k := range board.Keys() {
			r.Client.Del(ctx, k)
		}
	}()
	slots := map[int]bool{}
	for _, k := range board.Keys() {
		slots[keys.Slot(k)] = true
	}
	fmt.Printf("board %q: %d shards on %d hash slots, %s Redis, %d node(s) from %s\n", "arena", len(board.Keys()), len(slots), r.Kind, len(r.Addrs), r.Addrs[0])

	start := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	ups := make([]rank.Update, 0, 1000)
	for i := range *players {
		ups = append(ups, rank.Update{Member: "player-" + strconv.Itoa(i), Mode: rank.Increment, Value: rng.Int64N(100_000)})
		if len(ups) == cap(ups) || i == *players-1 {
			if _, err := board.Apply(ctx, ups); err != nil {
				log.Fatal(err)
			}
			ups = ups[:0]
		}
	}
	fmt.Printf("seeded %d players in %v (batched, pipelined)\n", *players, time.Since(start).Round(time.Millisecond))

	top, err := board.Top(ctx, 5)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("top 5:")
	for _, e := range top {
		fmt.Printf("  #%d %-14s %6d\n", e.Rank, e.Member, e.Score)
	}
	me := "player-4242"
	board.Add(ctx, me, 50_000)
	around, err := board.Around(ctx, me, 2)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("around %s after +50000:\n", me)
	for _, e := range around {
		fmt.Printf("  #%d %-14s %6d\n", e.Rank, e.Member, e.Score)
	}
}
