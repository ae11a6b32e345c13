package redpacket_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"golang.org/x/sync/errgroup"

	"github.com/casebook-dev/casebook/internal/luascript"
	"github.com/casebook-dev/casebook/internal/redisinfo"
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
	f := setupB(b, r, redpacket.Config{})
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

// BenchmarkObservability: Grab, the call the whole crowd makes, with no
// OpenTelemetry provider (impl=none: what every service that set none up
// pays), with the SDK's metrics (impl=metrics), its tracer sampling every
// span into an exporter that drops them (impl=traces), and both (impl=sdk),
// in one run, one caller per core, every grab a new user on a packet with
// shares left (the ok path).
func BenchmarkObservability(b *testing.B) {
	ctx := context.Background()
	for _, impl := range []string{"none", "metrics", "traces", "sdk"} {
		cfg := redpacket.Config{}
		if impl == "metrics" || impl == "sdk" {
			cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		}
		if impl == "traces" || impl == "sdk" {
			cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
		}
		f := setupB(b, testenv.NewRedis(b), cfg)
		id := f.packets(b, 1)[0]
		var n atomic.Int64
		b.Run("impl="+impl, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := f.s.Grab(ctx, id, "u"+strconv.FormatInt(n.Add(1), 10)); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// The shape of a batch in BenchmarkOpenBatched: OpenMany decides up to
// OpensPerCall opens of one bucket in one script call, so a batch is
// callsPerBatch full bucket calls in one pipeline, and inFlight batches are
// on the wire at once.
const (
	callsPerBatch = 16
	inFlight      = 4
	sharesPer     = 500
	rawBuckets    = 256
)

// BenchmarkOpenBatched measures opens coalesced across packets and
// pipelined on one Redis: each OpenMany carries callsPerBatch buckets' 128
// opens, each bucket's opens spread over its packets, every open a new
// claim (a fresh user on a packet with shares left). Beside it, raw: the
// same batches as pipelined EVALSHAs of a minimal script (pop a share, record
// it in a hash kept out of the listpack encoding, as a packet's state is).
// It reports opens/s and, where the server tells (INFO), the server's time
// per open: in the scripts (commandstats), and its main thread's CPU time,
// which also counts reading the calls and writing the replies — the figure
// that says how many opens one dedicated primary could serve — and the
// benchmark's own CPU time per open (the client's share of the machine).
func BenchmarkOpenBatched(b *testing.B) {
	ctx := context.Background()
	r := testenv.NewRedis(b)
	f := setupB(b, r, redpacket.Config{})
	b.Run("impl=raw", func(b *testing.B) {
		round := 0
		measureOpens(b, r, func(n int) [][][]redpacket.OpenRequest {
			round++
			ids := make([]int64, (n+sharesPer-1)/sharesPer)
			pipe := r.Client.Pipeline()
			for i := range ids {
				ids[i] = int64(round)<<32 | int64(i+1)
				state, list := rawKeys(r.Namespace, ids[i])
				shares := make([]any, sharesPer)
				for j := range shares {
					shares[j] = strconv.Itoa(j+1) + ":100"
				}
				pipe.RPush(ctx, list, shares...)
				pipe.HSet(ctx, state, "wide", strings.Repeat("-", 65))
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			return fullBatches(ids, n, func(p int64) int { return int(p % rawBuckets) })
		}, func(batch [][]redpacket.OpenRequest) error {
			calls := make([]luascript.Call, len(batch))
			for i, chunk := range batch {
				keys := []string{r.Namespace + ":{" + bucketOf(chunk[0].Packet) + "}:outbox"}
				args := []any{start.UnixMilli()}
				for _, o := range chunk {
					state, list := rawKeys(r.Namespace, o.Packet)
					keys = append(keys, state, list)
					args = append(args, o.User, o.Packet)
				}
				calls[i] = luascript.Call{Script: minimalOpen, Keys: keys, Args: args}
			}
			cmds, err := luascript.RunAll(ctx, r.Client, calls)
			if err != nil {
				return err
			}
			for i, cmd := range cmds {
				got, err := cmd.Int64Slice()
				if err != nil || len(got) != len(batch[i]) || slices.Contains(got, 0) {
					return fmt.Errorf("raw open: %v %v", got, err)
				}
			}
			return nil
		})
	})
	b.Run("impl=casebook", func(b *testing.B) {
		measureOpens(b, r, func(n int) [][][]redpacket.OpenRequest {
			return fullBatches(f.sendMany(b, (n+sharesPer-1)/sharesPer), n, f.s.Bucket)
		}, func(batch [][]redpacket.OpenRequest) error {
			reqs := slices.Concat(batch...)
			for i, res := range f.s.OpenMany(ctx, reqs) {
				if res.Err != nil || res.Amount < 1 {
					return fmt.Errorf("open %+v: %d, %w", reqs[i], res.Amount, res.Err)
				}
			}
			return nil
		})
	})
}

// minimalOpen is the least an open of a batch could do: pop a share and
// record it under the user.
var minimalOpen = redis.NewScript(`
-- KEYS[1] unused (the outbox, for the same shape as open.lua); then for
-- open i: KEYS[2i] a hash, KEYS[2i+1] a list of shares
-- ARGV[1] unused; then for open i: ARGV[2i] user, ARGV[2i+1] unused
local out = {}
for i = 1, (#KEYS - 1) / 2 do
  local item = redis.call('LPOP', KEYS[2 * i + 1])
  out[i] = 0
  if item then
    redis.call('HSET', KEYS[2 * i], 'u:' .. ARGV[2 * i], item)
    out[i] = 1
  end
end
return out`)

func bucketOf(packet int64) string { return "b" + strconv.FormatInt(packet%rawBuckets, 10) }

func rawKeys(ns string, packet int64) (state, list string) {
	p := ns + ":{" + bucketOf(packet) + "}:p:" + strconv.FormatInt(packet, 10)
	return p, p + ":shares"
}

// measureOpens times b.N opens in batches: prepare, untimed and on an empty
// namespace, returns the batches (each a list of one bucket's opens per
// script call); open runs one batch, inFlight at once, and any error fails
// the benchmark.
func measureOpens(b *testing.B, r *testenv.Redis, prepare func(n int) [][][]redpacket.OpenRequest, open func([][]redpacket.OpenRequest) error) {
	ctx := context.Background()
	if err := testenv.DeleteKeys(ctx, r.Client, r.Namespace+"*"); err != nil { // the last round's packets and outbox
		b.Fatal(err)
	}
	batches := prepare(b.N)
	before, client := readServerTime(ctx, r.Client), processCPU()
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	var g errgroup.Group
	for range inFlight {
		g.Go(func() error {
			for i := next.Add(1) - 1; i < int64(len(batches)); i = next.Add(1) - 1 {
				if err := open(batches[i]); err != nil {
					return err
				}
			}
			return nil
		})
	}
	err := g.Wait()
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "opens/s")
	b.ReportMetric(float64(processCPU()-client)/1e3/float64(b.N), "client-cpu-µs/open")
	if after := readServerTime(ctx, r.Client); after.ok && before.ok {
		b.ReportMetric((after.script-before.script)/float64(b.N), "script-µs/open")
		b.ReportMetric((after.cpu-before.cpu)/float64(b.N), "server-cpu-µs/open")
	}
}

// fullBatches lays n opens of packets (sharesPer each, users u0, u1, …)
// out in batches of callsPerBatch calls of OpensPerCall opens of one
// bucket, each bucket's opens spread over its packets.
func fullBatches(packets []int64, n int, bucket func(int64) int) [][][]redpacket.OpenRequest {
	byBucket := map[int][]redpacket.OpenRequest{}
	for u := range sharesPer {
		for _, p := range packets {
			byBucket[bucket(p)] = append(byBucket[bucket(p)], redpacket.OpenRequest{Packet: p, User: "u" + strconv.Itoa(u)})
		}
	}
	order := slices.Sorted(maps.Keys(byBucket))
	var out [][][]redpacket.OpenRequest
	var batch [][]redpacket.OpenRequest
	for n > 0 {
		for _, i := range order {
			q := byBucket[i]
			k := min(redpacket.OpensPerCall, len(q), n)
			if k == 0 {
				continue
			}
			batch, byBucket[i], n = append(batch, q[:k]), q[k:], n-k
			if len(batch) == callsPerBatch {
				out, batch = append(out, batch), nil
			}
		}
	}
	if batch != nil {
		out = append(out, batch)
	}
	return out
}

// serverTime is what the server spent so far, in µs, from INFO: script
// is the time in EVALSHA and EVAL (commandstats: the scripts alone), cpu
// the main thread's CPU time (user + sys: the scripts, and reading the
// calls and writing the replies, the part that bounds one primary). ok is
// false where the server keeps neither.
type serverTime struct {
	script, cpu float64
	ok          bool
}

// processCPU is the CPU time this process has spent (user + sys).
func processCPU() time.Duration {
	var u syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

func readServerTime(ctx context.Context, c redis.UniversalClient) serverTime {
	info, err := c.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return serverTime{}
	}
	m := redisinfo.CommandMicros(info)
	sha, withSha := m["evalsha"]
	eval, withEval := m["eval"]
	cpu, err := redisinfo.MainThreadCPU(info)
	return serverTime{script: sha + eval, cpu: float64(cpu.Microseconds()), ok: (withSha || withEval) && err == nil}
}

func setupB(b *testing.B, r *testenv.Redis, cfg redpacket.Config) *fixture {
	b.Helper()
	clk := testenv.NewClock(start)
	cfg.Namespace, cfg.Now, cfg.TablesPerDB, cfg.MaxTotal = r.Namespace, clk.Now, 1, 1<<40
	s, err := redpacket.New(r.Client, testenv.NewSQLs(b, 1), cfg)
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

var senders atomic.Int64

// sendMany sends n packets of sharesPer shares, eight at a time, from
// senders never used before.
func (f *fixture) sendMany(b *testing.B, n int) []int64 {
	ctx := context.Background()
	ids := make([]int64, n)
	var g errgroup.Group
	g.SetLimit(8)
	for i := range ids {
		g.Go(func() error {
			sender := "s" + strconv.FormatInt(senders.Add(1), 10)
			if err := f.s.Deposit(ctx, sender, 500_000); err != nil {
				return err
			}
			p, err := f.s.Send(ctx, redpacket.SendRequest{Sender: sender, RequestID: "r", Total: 500_000, Count: sharesPer})
			ids[i] = p.ID
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	return ids
}
