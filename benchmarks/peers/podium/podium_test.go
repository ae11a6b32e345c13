package peerbench

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/topfreegames/podium/leaderboard/v2/database"
	"github.com/topfreegames/podium/leaderboard/v2/model"
	"github.com/topfreegames/podium/leaderboard/v2/service"

	"github.com/casebook-dev/casebook/rank"
)

// Both libraries on the same Redis (PEER_REDIS, default 127.0.0.1:6393: use
// a private one), a 1-shard board and a podium leaderboard of the same
// 10,000 members with the same scores; each benchmark pair runs one call per
// op, sequentially.
const members = 10_000

func addr() string {
	if a := os.Getenv("PEER_REDIS"); a != "" {
		return a
	}
	return "127.0.0.1:6393"
}

func setup(b *testing.B) (*rank.Board, *service.Service, string) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr()})
	b.Cleanup(func() { rdb.Close() })
	ns := "peer:" + strconv.FormatUint(rand.Uint64(), 36)
	board, err := rank.New(rdb, rank.Config{Name: "b", Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	host, port, _ := strings.Cut(addr(), ":")
	p, _ := strconv.Atoi(port)
	pod := service.NewService(database.NewRedisDatabase(database.RedisOptions{Host: host, Port: p}))
	lb := ns + ":podium"
	var ups []rank.Update
	var ms []*model.Member
	for i := range members {
		m, s := "m"+strconv.Itoa(i), int64(i*7919%100_000)
		ups = append(ups, rank.Update{Member: m, Mode: rank.Replace, Value: s})
		ms = append(ms, &model.Member{PublicID: m, Score: s})
		if len(ups) == 500 {
			if _, err := board.Apply(ctx, ups); err != nil {
				b.Fatal(err)
			}
			if err := pod.SetMembersScore(ctx, lb, ms, false, ""); err != nil {
				b.Fatal(err)
			}
			ups, ms = nil, nil
		}
	}
	b.Cleanup(func() {
		iter := rdb.Scan(ctx, 0, ns+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	return board, pod, lb
}

func BenchmarkPeer(b *testing.B) {
	ctx := context.Background()
	board, pod, lb := setup(b)
	var n int
	member := func() string { n++; return "m" + strconv.Itoa(n*31%members) }
	b.Run("rank/casebook", func(b *testing.B) {
		for b.Loop() {
			if _, err := board.Rank(ctx, member()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rank/podium", func(b *testing.B) {
		for b.Loop() {
			if _, err := pod.GetMember(ctx, lb, member(), "desc", false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("top20/casebook", func(b *testing.B) {
		for b.Loop() {
			if _, err := board.Top(ctx, 20); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("top20/podium", func(b *testing.B) {
		for b.Loop() {
			if _, err := pod.GetLeaders(ctx, lb, 20, 1, "desc"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("around10/casebook", func(b *testing.B) {
		for b.Loop() {
			if _, err := board.Around(ctx, member(), 5); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("around10/podium", func(b *testing.B) {
		for b.Loop() {
			if _, err := pod.GetAroundMe(ctx, lb, 10, member(), "desc", false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("set/casebook", func(b *testing.B) {
		for b.Loop() {
			if _, err := board.Set(ctx, member(), int64(n%100_000)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("set/podium", func(b *testing.B) {
		for b.Loop() {
			if _, err := pod.SetMemberScore(ctx, lb, member(), int64(n%100_000), false, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
}
