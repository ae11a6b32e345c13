package feed_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
func BenchmarkTimelineRedisCost(b *testing.B) {
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
	cpu0, cmds0 := info()
	pages := 0
	for b.Loop() {
		p, err := s.Timeline(ctx, reader, "", 20)
		if err != nil || len(p.Posts) != 20 {
			b.Fatalf("%d posts: %v", len(p.Posts), err)
		}
		pages++
	}
	cpu1, cmds1 := info()
	b.ReportMetric((cpu1-cpu0)/float64(pages), "redis-µs/page")
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
