package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	newsfeed "github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/internal/devcore"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/rank"
)

// workSweep reruns an operation at several sizes of the work it does (not
// of its concurrency), for the HTML report: how Top's latency grows with a
// board's shards, how a post's fan-out grows with its followers. It runs
// when -html is given and the measurement it belongs with is selected.
type workSweep struct {
	Name, Unit, Axis string
	Xs               []int
	SelectedBy       string
	Make             func(x int) Measurement
}

var workSweeps = []workSweep{
	{Name: "rank.top", Unit: "Top(100) reads of a 10,000-member board, 4 callers", Axis: "shards", Xs: []int{1, 4, 16, 64},
		SelectedBy: "rank.add", Make: rankTop},
	{Name: "feed.fanout", Unit: "posts fanned out to every active follower (one op: publish, relay, every chunk handled)", Axis: "followers",
		Xs: []int{100, 1000, 10000}, SelectedBy: "feed.read", Make: feedFanout},
}

// rankTop reads Top(100) of a board of 10,000 members over shards sorted
// sets, all on the chosen Redis: the merge's cost, not a cluster's spread.
func rankTop(shards int) Measurement {
	return onRedis("rank.top", "Top(100) reads", redisWorkers, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		board, err := rank.New(r.Client, rank.Config{Name: "top", Namespace: ns, Shards: shards, Epoch: time.Now().Add(-time.Second)})
		if err != nil {
			return nil, err
		}
		updates := make([]rank.Update, 0, 1000)
		for i := range 10_000 {
			updates = append(updates, rank.Update{Member: "m" + strconv.Itoa(i), Mode: rank.Replace, Value: int64(i*7919%100_000 + 1)})
			if len(updates) == cap(updates) {
				if _, err := board.Apply(ctx, updates); err != nil {
					return nil, err
				}
				updates = updates[:0]
			}
		}
		return func() error {
			top, err := board.Top(ctx, 100)
			if err == nil && len(top) != 100 {
				err = fmt.Errorf("Top(100) returned %d entries", len(top))
			}
			return err
		}, nil
	})
}

// feedFanout publishes a post by an author whose followers all read
// recently (so each gets it pushed) and fans it out to every one of them:
// relay in chunks of 500, each chunk handled, straight into Redis (Kafka
// left out). One worker: an op is one post's whole fan-out.
func feedFanout(followers int) Measurement {
	return onRedis("feed.fanout", "posts fanned out", 1, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		sqlb, err := env.SQL(ctx)
		if err != nil {
			return nil, err
		}
		svc, err := newsfeed.New(r.Client, []*sqlx.DB{sqlb.DB}, newsfeed.Config{Namespace: ns, TablesPerDB: 4, CelebrityThreshold: 1 << 40})
		if err != nil {
			return nil, err
		}
		if err := svc.Migrate(ctx); err != nil {
			return nil, err
		}
		// Users and posts of their own: the SQL database is shared with the
		// other measurements and sizes (only Redis keys are namespaced).
		author, follower := "author"+strconv.Itoa(followers), func(i int) string { return "f" + strconv.Itoa(followers) + "-" + strconv.Itoa(i) }
		follows := make([][2]string, followers)
		for i := range follows {
			follows[i] = [2]string{follower(i), author}
		}
		if err := svc.SeedFollows(ctx, follows); err != nil {
			return nil, err
		}
		for i := range followers { // active: the fan-out pushes to them
			if _, err := svc.Timeline(ctx, follower(i), "", 1); err != nil {
				return nil, err
			}
		}
		push := outbox.Direct(svc.HandleChunk)
		var n atomic.Int64
		return func() error {
			if _, err := svc.Publish(ctx, newsfeed.PublishRequest{Author: author, RequestID: ns + "-" + strconv.FormatInt(n.Add(1), 10), Body: "news"}); err != nil {
				return err
			}
			relayed, err := svc.RelayFanout(ctx, push, "feed-chunks", 10)
			if err == nil && relayed != 1 {
				err = fmt.Errorf("relayed %d posts, want 1", relayed)
			}
			return err
		}, nil
	})
}
