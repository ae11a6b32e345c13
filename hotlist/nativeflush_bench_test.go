package hotlist_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/redisinfo"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// zaddInScript is how flush.lua writes a batch of (score, member) pairs:
// ZADD 800 pairs at a time from ARGV.
var zaddInScript = redis.NewScript(`
for a = 1, #ARGV, 800 do
  redis.call('ZADD', KEYS[1], unpack(ARGV, a, math.min(a + 799, #ARGV)))
end
return 1`)

// BenchmarkZaddScriptOrNative: Redis' time per (score, member) pair written
// into a 10,000-member sorted set in batches of 7,000 pairs (members drawn
// from 20,000), by a script as flush.lua does it and by ZADD itself, as a
// WATCH transaction does (nativeflush.go). Each op is one batch; the
// metric is INFO commandstats' time in EVALSHA, or in ZADD, per pair (the
// server's whole command time: on a shared server, use a private one).
func BenchmarkZaddScriptOrNative(b *testing.B) {
	r := testenv.NewRedis(b)
	r.NeedsServer(b, "it reads the server's INFO commandstats")
	ctx := context.Background()
	for _, way := range []string{"script", "zadd"} {
		b.Run(way, func(b *testing.B) {
			key := r.Namespace + ":zadd:" + way
			rng := rand.New(rand.NewPCG(1, 2))
			pairs := func(n, of int) []any {
				out := make([]any, 0, 2*n)
				for range n {
					out = append(out, strconv.FormatFloat(rng.Float64()*1000, 'g', -1, 64), "item:"+strconv.Itoa(rng.IntN(of)))
				}
				return out
			}
			if err := r.Client.Do(ctx, append([]any{"ZADD", key}, pairs(10_000, 5_000_000)...)...).Err(); err != nil {
				b.Fatal(err)
			}
			const per = 7000
			// A script's ZADDs count in ZADD's time too: the script's cost is
			// EVALSHA's alone.
			command := map[string]string{"script": "evalsha", "zadd": "zadd"}[way]
			before := commandMicros(b, r, command)
			for b.Loop() {
				b.StopTimer()
				batch := pairs(per, 20_000)
				b.StartTimer()
				var err error
				if way == "script" {
					err = zaddInScript.Run(ctx, r.Client, []string{key}, batch...).Err()
				} else {
					err = r.Client.Do(ctx, append([]any{"ZADD", key}, batch...)...).Err()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			used := commandMicros(b, r, command) - before
			b.ReportMetric(used*1000/float64(b.N*per), "server-ns/pair")
		})
	}
}

// commandMicros is the time commandstats counts in command so far.
func commandMicros(b *testing.B, r *testenv.Redis, command string) float64 {
	b.Helper()
	info, err := r.Client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	return redisinfo.CommandMicros(info)[command]
}
