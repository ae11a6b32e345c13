package main

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/jmoiron/sqlx"

	newsfeed "github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/internal/devcore"
	"github.com/casebook-dev/casebook/outbox"
)

// feedRead measures 20-post timeline pages (four callers) of 100 readers
// who each follow 20 ordinary authors (50 followers each: pushed into the
// readers' inboxes by a fan-out before the clock starts) and 5 celebrities
// (100 followers, over the threshold of 80: pulled and merged at read).
// Every reader has read once before the clock starts, so the timed pages
// are steady-state reads, not first-read inbox rebuilds.
func feedRead() Measurement {
	return onRedis("feed.read", "timeline pages (20 posts, hybrid)", redisWorkers, func(ctx context.Context, env *Env, r *devcore.Redis, ns string) (func() error, error) {
		sqlb, err := env.SQL(ctx)
		if err != nil {
			return nil, err
		}
		svc, err := newsfeed.New(r.Client, []*sqlx.DB{sqlb.DB}, newsfeed.Config{Namespace: ns, TablesPerDB: 4, CelebrityThreshold: 80})
		if err != nil {
			return nil, err
		}
		if err := svc.Migrate(ctx); err != nil {
			return nil, err
		}
		var follows [][2]string
		for i := range 100 {
			for a := range 20 {
				follows = append(follows, [2]string{"r" + strconv.Itoa(i), "a" + strconv.Itoa((i+a)%40)})
			}
			for c := range 5 {
				follows = append(follows, [2]string{"r" + strconv.Itoa(i), "c" + strconv.Itoa(c)})
			}
		}
		if err := svc.SeedFollows(ctx, follows); err != nil {
			return nil, err
		}
		reader := func(i int) string { return "r" + strconv.Itoa(i) }
		for i := range 100 { // active readers: fan-out pushes to them
			if _, err := svc.Timeline(ctx, reader(i), "", 20); err != nil {
				return nil, err
			}
		}
		for i := range 45 * 20 {
			author := "a" + strconv.Itoa(i%40)
			if i >= 40*20 {
				author = "c" + strconv.Itoa(i%5)
			}
			if _, err := svc.Publish(ctx, newsfeed.PublishRequest{Author: author, RequestID: strconv.Itoa(i), Body: "a post of about a tweet's length, give or take a few words"}); err != nil {
				return nil, err
			}
		}
		for {
			n, err := svc.RelayFanout(ctx, outbox.Direct(svc.HandleChunk), "feed-chunks", 500)
			if err != nil {
				return nil, err
			}
			if n == 0 {
				break
			}
		}
		for i := range 100 { // steady state: pushed posts folded in, posts cached
			if _, err := svc.Timeline(ctx, reader(i), "", 20); err != nil {
				return nil, err
			}
		}
		var n atomic.Int64
		return func() error {
			_, err := svc.Timeline(ctx, reader(int(n.Add(1)%100)), "", 20)
			return err
		}, nil
	})
}
