package signin_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/signin"
)

// BenchmarkSign: one script call per sign-in (bit, streak, outbox), against a
// raw go-redis SETBIT on the same server in the same run.
func BenchmarkSign(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	s, err := signin.New(r.Client, signin.Config{Namespace: r.Namespace})
	if err != nil {
		b.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b.Run("sign", func(b *testing.B) {
		b.ReportAllocs()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				// Each call a new user-day, so every call writes a reward.
				i := n.Add(1)
				if _, err := s.Sign(ctx, "u"+strconv.FormatInt(i%100000, 10), at.AddDate(0, 0, int(i/100000))); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("raw-setbit", func(b *testing.B) {
		b.ReportAllocs()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1)
				if err := r.Client.SetBit(ctx, r.Namespace+":raw:u"+strconv.FormatInt(i%100000, 10), 333, 1).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkBitmapMemory reports what Redis says (MEMORY USAGE) one user's
// fully signed year costs, against the seed's 46 bytes of bits.
func BenchmarkBitmapMemory(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	s, _ := signin.New(r.Client, signin.Config{Namespace: r.Namespace, Buckets: 1})
	for d := time.Date(2028, 1, 1, 12, 0, 0, 0, time.UTC); d.Year() == 2028; d = d.AddDate(0, 0, 1) {
		if _, err := s.Sign(ctx, "full-year", d); err != nil {
			b.Fatal(err)
		}
	}
	var usage int64
	for b.Loop() {
		iter := r.Client.Scan(ctx, 0, r.Namespace+"*:u:full-year:2028", 10).Iterator()
		for iter.Next(ctx) {
			usage = r.Client.MemoryUsage(ctx, iter.Val()).Val()
		}
	}
	if usage == 0 {
		b.Fatal("bitmap key not found")
	}
	b.ReportMetric(float64(usage), "bytes/user-year")
	b.ReportMetric(float64(usage)/46, "x-seed-46B")
}
