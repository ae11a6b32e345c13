package redpacket_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/redpacket"
)

// minimal is the smallest script an open could be: pop one element.
var minimal = redis.NewScript(`return redis.call('LPOP', KEYS[1])`)

// BenchmarkOpen compares one Open (state read, pop, claim, counters,
// outbox entry) with a raw EVALSHA of the minimal script, same server, same
// run, one caller per core.
func BenchmarkOpen(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	f := setupB(b, r)
	ids := f.packets(b, 500)
	b.Run("raw-evalsha", func(b *testing.B) {
		key := r.Namespace + ":{raw}:list"
		r.Client.RPush(ctx, key, make([]any, 1024)...)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				minimal.Run(ctx, r.Client, []string{key})
			}
		})
	})
	var n atomic.Int64
	b.Run("open", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1)
				f.s.Open(ctx, ids[i%int64(len(ids))], fmt.Sprint("u", i)) // ErrEmpty once a packet is used up: the same script path
			}
		})
	})
}

// BenchmarkOpenBatched: opens coalesced across packets — 2,000 per
// OpenMany, one script call per bucket, all in one pipeline — on one Redis.
func BenchmarkOpenBatched(b *testing.B) {
	ctx := context.Background()
	f := setupB(b, testenv.NewRedis(b))
	ids := f.packets(b, 2000)
	var n atomic.Int64
	b.ResetTimer()
	b.ReportAllocs()
	b.SetParallelism(2)
	b.RunParallel(func(pb *testing.PB) {
		reqs := make([]redpacket.OpenRequest, 0, 2000)
		for pb.Next() {
			i := n.Add(1)
			reqs = append(reqs, redpacket.OpenRequest{Packet: ids[i%int64(len(ids))], User: fmt.Sprint("u", i)})
			if len(reqs) == cap(reqs) {
				f.s.OpenMany(ctx, reqs)
				reqs = reqs[:0]
			}
		}
		f.s.OpenMany(ctx, reqs)
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "opens/s")
}

func setupB(b *testing.B, r *testenv.Redis) *fixture {
	b.Helper()
	clk := testenv.NewClock(start)
	s, err := redpacket.New(r.Client, testenv.NewSQLs(b, 1), redpacket.Config{Namespace: r.Namespace, Now: clk.Now, TablesPerDB: 1, MaxTotal: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return &fixture{s: s, r: r, clk: clk}
}

// packets sends n packets of 500 shares each; once they are used up, opens
// take the "empty" path of the same script.
func (f *fixture) packets(b *testing.B, n int) []int64 {
	ctx := context.Background()
	ids := make([]int64, n)
	for i := range ids {
		sender := fmt.Sprint("s", i)
		f.s.Deposit(ctx, sender, 1<<30)
		p, err := f.s.Send(ctx, redpacket.SendRequest{Sender: sender, RequestID: "r", Total: 1 << 30, Count: 500})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = p.ID
	}
	b.ResetTimer()
	return ids
}
