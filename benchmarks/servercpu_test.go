package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/devcore"
	"github.com/casebook-dev/casebook/internal/redisinfo"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// A Redis-bound load is sized by the server's CPU time per operation, so
// the plan does not follow the load generator: on a private redis-server,
// runs with the harness's 16 workers and with 64 size the same peak within
// 25%, where their closed-loop rates may differ by more. (Below 16 clients
// the server's CPU per operation still follows the client count — see
// redisWorkers — which is why the harness runs 16.) The claim is for a quiet
// machine (a busy one makes the server's CPU per operation follow its
// neighbours), so the test runs only when asked: .ci/run runs it alone,
// after the suites.
func TestSizingStableAcrossWorkers(t *testing.T) {
	if os.Getenv("CASEBOOK_QUIET_MACHINE") != "1" {
		t.Skip("needs a quiet machine: set CASEBOOK_QUIET_MACHINE=1 with nothing else running (.ci/run does, after the suites)")
	}
	if !devcore.HaveRedisServer() {
		if os.Getenv("CI") != "" || testenv.RequireReal() {
			t.Fatal("needs redis-server on PATH for a private server to measure")
		}
		t.Skip("needs redis-server: a private server to read INFO cpu from (miniredis has none)")
	}
	ctx := context.Background()
	byName := map[string]Measurement{}
	for _, m := range measurements() {
		byName[m.Name] = m
	}
	for _, name := range []string{"rank.add", "signin.sign"} {
		t.Run(name, func(t *testing.T) {
			srv, err := devcore.StartRedisServer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			env := &Env{RedisAddr: srv.Addr}
			t.Cleanup(env.Close)
			// Each worker count runs four times, interleaved, and the medians
			// are compared: a neighbour's burst moves one run either way (on
			// this VM, one run of 4 workers cost 1.5 times another's, and a
			// lucky one 0.6 times), and the median of four is moved by
			// neither the cheapest nor the dearest. At 4 workers against 16
			// a real gap remained (16 workers' medians cost 0.78-0.88 times
			// 4 workers' per operation in three runs here; signin.sign 8.60
			// against 11.06 primaries in one): the server's wake-ups, which
			// redisWorkers describes.
			const peak, rounds = 100_000, 4
			var sizes [2][]float64
			for range rounds {
				for i, workers := range []int{redisWorkers, 4 * redisWorkers} {
					wakes := serverWakes(ctx, t, env)
					r := byName[name].Run(ctx, env, 2*time.Second, workers, nil)
					if r.Err != "" || r.Fallback {
						t.Fatalf("%d workers: %+v", workers, r)
					}
					if r.ServerPerSec <= 0 || !strings.HasPrefix(r.ServerCPU, "INFO cpu: main threads of 1 primary") {
						t.Fatalf("%d workers: no server CPU read (%q)", workers, r.ServerCPU)
					}
					size, ok := SizeFor(peak, r.ServerPerSec, 0.6, 1)
					if !ok {
						t.Fatalf("%d workers: not sized", workers)
					}
					sizes[i] = append(sizes[i], size.Exact)
					t.Logf("%d workers: %.0f/s closed loop, %.0f/s per server core → %.2f primaries for %d/s; the server slept %s",
						workers, r.PerSec, r.ServerPerSec, size.Exact, peak, wakes(r.PerSec*2))
				}
			}
			lo, hi := median(sizes[0]), median(sizes[1])
			if ratio := max(lo, hi) / min(lo, hi); ratio > 1.25 {
				t.Errorf("%d and %d workers size %d/s as %.2f and %.2f primaries (medians of %v and %v): %.2f× apart, want within 1.25×",
					redisWorkers, 4*redisWorkers, peak, lo, hi, sizes[0], sizes[1], ratio)
			}
		})
	}
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// serverWakes starts counting the times the Redis server behind env blocked
// (its voluntary context switches, from /proc): the function it returns
// says how often it slept per operation, for ops operations, or why it
// cannot tell. A server kept busier sleeps less per operation, and each
// sleep and wake is server CPU that the operation's own work does not need.
func serverWakes(ctx context.Context, t *testing.T, env *Env) func(ops float64) string {
	r, err := env.Redis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info, err := r.Client.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := redisinfo.Field(info, "process_id")
	read := func() (float64, bool) {
		b, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			return 0, false
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				return n, err == nil
			}
		}
		return 0, false
	}
	before, ok := read()
	return func(ops float64) string {
		after, ok2 := read()
		if !ok || !ok2 || ops <= 0 {
			return "an unknown number of times (no /proc/" + pid + "/status)"
		}
		return fmt.Sprintf("%.2f times per operation", (after-before)/ops)
	}
}

// /proc/<pid>/stat's CPU fields are read after the command name, which may
// hold spaces and parentheses; this process's own reading grows as it
// works.
func TestProcessCPU(t *testing.T) {
	got, err := parseProcStat("4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 12 0 100 0 0")
	if err != nil || got != 3250*time.Millisecond {
		t.Errorf("parse: %v, %v; want 3.25s (325 ticks)", got, err)
	}
	for _, bad := range []string{"", "12 noparen S 1", "1 (x) S 1 2 3", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 5"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parse %q: no error", bad)
		}
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skipf("needs /proc (Linux): %v", err)
	}
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	start, sink := testenv.Now(), 0
	for i := 1; ; i++ { // spin until the kernel has counted 30 ms more
		sink += i * i
		if i%1_000_000 != 0 {
			continue
		}
		after, err := processCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after-before >= 30*time.Millisecond {
			break
		}
		if testenv.Since(start) > 10*time.Second {
			t.Fatalf("after 10 s of spinning, /proc/self/stat counts %v of CPU (sink %d)", after-before, sink)
		}
	}
}

// A server the harness cannot read says why, and the load is sized by the
// closed-loop rate instead.
func TestServerCPUUnavailable(t *testing.T) {
	ctx := context.Background()
	e := &Env{MySQLDSN: "root@tcp(10.1.2.3:3306)/"}
	if read, why := e.serverCPUOf(ctx, TierMySQL); read != nil || why != "server CPU unavailable: the MySQL server at 10.1.2.3:3306 is not on this machine" {
		t.Errorf("remote MySQL: %v", why)
	}
	if read, why := (&Env{}).serverCPUOf(ctx, TierMySQL); read != nil || !strings.Contains(why, "SQLite runs inside this process") {
		t.Errorf("SQLite: %v", why)
	}
	if read, why := (&Env{}).serverCPUOf(ctx, TierApp); read != nil || why != "" {
		t.Errorf("app tier: %v", why)
	}
}
