package feed_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/casebook-dev/casebook/internal/redisinfo"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// BenchmarkTimelineRedisCost reads BenchmarkTimeline's reader's first page
// (20 posts; 2,000 inbox posts, 20 pulled celebrities) over and over and
// reports what a page costs Redis: its CPU time per page (INFO cpu, main
// thread) and, logged, each command's time per page (INFO commandstats; a
// script's commands count both on their own line and in evalsha's). Both
// are server-wide: on a shared Redis other clients count too, so measure on
// a private redis-server (CASEBOOK_REDIS_ADDR) for a figure to quote:
//
//	go test -run '^$' -bench TimelineRedisCost -benchtime 2000x -v ./feed/
//
// page=steady is a returning reader's page; page=first a first read after
// the reader's keys all expired (inbox, pushed list, followees, mutes, view
// token: unlinked before each page), which rebuilds the 2,000-post inbox.
// The UNLINK's cost on missing keys (its round trip, mostly) is measured
// alone and taken off; what freeing the keys adds stays in (the unlink line
// of the log, about 1% of a first page).
//
// page=pushed is a returning reader's page with one post pushed since the
// last (an inbox entry appended to the pushed list, as fan-out does, before
// each page; that RPUSH's cost measured alone and taken off).
//
// These three read one page at a time, so Redis sleeps and wakes for nearly
// every command, and that counts in its CPU: a server kept busy by many
// clients pays it once per many commands (see benchmarks' redisWorkers).
// page=steady/clients=16 reads the steady page from 16 goroutines at once,
// as a serving process would, the figure to size by.
func BenchmarkTimelineRedisCost(b *testing.B) {
	b.Run("page=steady", func(b *testing.B) { benchRedisCost(b, "steady") })
	b.Run("page=steady/clients=16", func(b *testing.B) { benchRedisCost(b, "steady16") })
	b.Run("page=pushed", func(b *testing.B) { benchRedisCost(b, "pushed") })
	b.Run("page=first", func(b *testing.B) { benchRedisCost(b, "first") })
}

func benchRedisCost(b *testing.B, kind string) {
	r := testenv.NewRedis(b)
	r.NeedsServer(b, "INFO cpu and commandstats, which miniredis lacks")
	s, reader := seedTimeline(b, r)
	ctx := context.Background()
	info := func() (cpu float64, cmds map[string]float64) {
		text, err := r.Client.Info(ctx, "cpu", "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		main, err := redisinfo.MainThreadCPU(text)
		if err != nil {
			b.Fatal(err)
		}
		return float64(main.Microseconds()), redisinfo.CommandMicros(text)
	}
	var expired []string
	for _, part := range []string{"inbox", "pushed", "following", "muted", "viewtok"} {
		expired = append(expired, s.UserKey(reader, part))
	}
	unlink := func(keys []string) {
		if err := r.Client.Unlink(ctx, keys...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	// The pushes: inbox entries as fan-out appends them ("score:id").
	zs, err := r.Client.ZRangeWithScores(ctx, s.InboxKey(reader), 1, 200).Result()
	if err != nil || len(zs) < 200 {
		b.Fatalf("inbox entries %d: %v", len(zs), err)
	}
	pushed := s.PushedKey(reader)
	push := func(key string, i int) {
		z := zs[i%len(zs)]
		if err := r.Client.RPush(ctx, key, fmt.Sprintf("%d:%s", int64(z.Score), z.Member)).Err(); err != nil {
			b.Fatal(err)
		}
	}
	// What the UNLINK before each first page, or the RPUSH before each
	// pushed one, costs Redis alone: on missing keys, or a list of its own.
	var prep float64
	if kind != "steady" {
		missing := make([]string, len(expired))
		for i, k := range expired {
			missing[i] = k + ":missing"
		}
		c0, _ := info()
		for i := range 2000 {
			if kind == "first" {
				unlink(missing)
			} else {
				push(pushed+":alone", i)
			}
		}
		c1, _ := info()
		prep = (c1 - c0) / 2000
		unlink([]string{pushed + ":alone"})
	}
	cpu0, cmds0 := info()
	pages := 0
	if kind == "steady16" {
		var n atomic.Int64
		b.SetParallelism((16 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := s.Timeline(ctx, reader, "", 20)
				if err != nil || len(p.Posts) != 20 {
					b.Errorf("%d posts: %v", len(p.Posts), err)
					return
				}
				n.Add(1)
			}
		})
		pages = int(n.Load())
	}
	for i := 0; kind != "steady16" && b.Loop(); i++ {
		switch kind {
		case "first":
			unlink(expired)
		case "pushed":
			push(pushed, i)
		}
		p, err := s.Timeline(ctx, reader, "", 20)
		if err != nil || len(p.Posts) != 20 {
			b.Fatalf("%d posts: %v", len(p.Posts), err)
		}
		pages++
	}
	cpu1, cmds1 := info()
	b.ReportMetric((cpu1-cpu0)/float64(pages)-prep, "redis-µs/page")
	var lines []string
	for name, usec := range cmds1 {
		if d := usec - cmds0[name]; d > 0 {
			lines = append(lines, fmt.Sprintf("%10.2f µs/page  %s", d/float64(pages), name))
		}
	}
	slices.Sort(lines)
	slices.Reverse(lines)
	b.Logf("%d pages; by command (INFO commandstats):\n%s", pages, strings.Join(lines, "\n"))
}
