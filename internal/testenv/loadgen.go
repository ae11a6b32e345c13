package testenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// envLoadGen makes a test binary started by NewLoadGen a load generator
// instead of running tests (testenv.Main checks it first).
const envLoadGen = "CASEBOOK_TESTENV_LOADGEN"

// LoadGen is an HTTP load generator in a child process — this test binary
// run again, driving vegeta — so that a benchmark of an HTTP server times
// the server, not a client sharing its process, heap and scheduler. The
// package's TestMain must call Main.
type LoadGen struct {
	in  io.WriteCloser
	out *bufio.Scanner
	cmd *exec.Cmd
}

// LoadResult is one round of requests as the load generator saw it.
type LoadResult struct {
	Requests uint64         `json:"requests"`
	Duration time.Duration  `json:"duration"` // first request sent to last reply
	P50      time.Duration  `json:"p50"`
	P99      time.Duration  `json:"p99"`
	Codes    map[string]int `json:"codes"`
	Errors   []string       `json:"errors"`
}

// PerSecond is the round's request rate.
func (r LoadResult) PerSecond() float64 { return float64(r.Requests) / r.Duration.Seconds() }

// NewLoadGen starts a load generator that sends GETs to urls in turn from
// workers concurrent connections (redirects are not followed). It stops
// when the test ends.
func NewLoadGen(t testing.TB, workers int, urls []string) *LoadGen {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "targets")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(strings.Join(urls, "\n")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envLoadGen+"="+strconv.Itoa(workers)+","+f.Name())
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start the load generator: %v", err)
	}
	g := &LoadGen{in: in, out: bufio.NewScanner(out), cmd: cmd}
	g.out.Buffer(nil, 1<<20)
	t.Cleanup(func() {
		in.Close() // the child exits at end of input
		if err := cmd.Wait(); err != nil {
			t.Errorf("testenv: load generator: %v", err)
		}
	})
	return g
}

// Run sends n requests as fast as the workers go and returns what they got.
func (g *LoadGen) Run(n int) (LoadResult, error) {
	if _, err := fmt.Fprintln(g.in, n); err != nil {
		return LoadResult{}, fmt.Errorf("testenv: load generator: %w", err)
	}
	if !g.out.Scan() {
		return LoadResult{}, fmt.Errorf("testenv: load generator stopped: %v", g.out.Err())
	}
	var r LoadResult
	if err := json.Unmarshal(g.out.Bytes(), &r); err != nil {
		return LoadResult{}, fmt.Errorf("testenv: load generator said %q: %w", g.out.Text(), err)
	}
	return r, nil
}

// runLoadGen is the child's side: one round per line of stdin (a request
// count), one JSON LoadResult per line of stdout.
func runLoadGen(spec string) int {
	workersText, file, _ := strings.Cut(spec, ",")
	workers, err := strconv.ParseUint(workersText, 10, 32)
	data, ferr := os.ReadFile(file)
	if err != nil || ferr != nil || workers == 0 {
		fmt.Fprintf(os.Stderr, "testenv: load generator: bad spec %q: %v %v\n", spec, err, ferr)
		return 2
	}
	var targets []vegeta.Target
	for _, u := range strings.Split(string(data), "\n") {
		targets = append(targets, vegeta.Target{Method: "GET", URL: u})
	}
	in := bufio.NewScanner(os.Stdin)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		n, err := strconv.ParseUint(in.Text(), 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "testenv: load generator: bad count %q\n", in.Text())
			return 2
		}
		atk := vegeta.NewAttacker(vegeta.Workers(workers), vegeta.MaxWorkers(workers),
			vegeta.Connections(int(workers)), vegeta.Redirects(vegeta.NoFollow), vegeta.KeepAlive(true))
		pace := countPacer(n)
		var m vegeta.Metrics
		for res := range atk.Attack(vegeta.NewStaticTargeter(targets...), pace, 0, "bench") {
			m.Add(res)
		}
		m.Close()
		if err := enc.Encode(LoadResult{Requests: m.Requests, Duration: m.End.Sub(m.Earliest), P50: m.Latencies.P50,
			P99: m.Latencies.P99, Codes: m.StatusCodes, Errors: m.Errors}); err != nil {
			return 1
		}
	}
	return 0
}

// countPacer sends its count of requests as fast as the workers take them.
type countPacer uint64

func (n countPacer) Pace(_ time.Duration, hits uint64) (time.Duration, bool) {
	return 0, hits >= uint64(n)
}

func (countPacer) Rate(time.Duration) float64 { return 0 }
