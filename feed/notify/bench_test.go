package notify_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/feed/notify"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func benchFeed(b *testing.B, cfg notify.Config) (*notify.Feed, func() time.Time) {
	b.Helper()
	r := testenv.NewRedis(b)
	clk := testenv.NewClock(testenv.Now())
	cfg.Namespace, cfg.Now = r.Namespace, clk.Now
	f, err := notify.New(r.Client, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return f, clk.Now
}

// BenchmarkAdd: new activities, in parallel, spread over 1,000 users and
// 50 objects each (so groups are made, joined and, past Cap, dropped).
func BenchmarkAdd(b *testing.B) {
	f, now := benchFeed(b, notify.Config{})
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			a := notify.Activity{ID: fmt.Sprint("b", i), Actor: fmt.Sprint("u", i%97), Verb: "like",
				Object: fmt.Sprint("post:", i%50), Target: fmt.Sprint("t", i%1000), Time: now()}
			if err := f.Add(ctx, a); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkGroups: the first page of 20 of a user holding Cap (100)
// groups of 5 listed actors each, in parallel.
func BenchmarkGroups(b *testing.B) {
	f, now := benchFeed(b, notify.Config{})
	ctx := context.Background()
	for i := range 100 * 5 {
		a := notify.Activity{ID: fmt.Sprint("g", i), Actor: fmt.Sprint("u", i%5), Verb: "like",
			Object: fmt.Sprint("post:", i/5), Target: "reader", Time: now()}
		if err := f.Add(ctx, a); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if p, err := f.Groups(ctx, "reader", "", 20); err != nil || len(p.Groups) != 20 {
				b.Errorf("%d groups, %v", len(p.Groups), err)
				return
			}
		}
	})
}
