// Command benchmarks is casebook's capacity-planning harness.
//
// It takes the seeds' scenarios (DAU, actions per user, peak window and
// factor, bytes per record), computes average and peak QPS and storage from
// them — printing the seed's own figure beside each computed one and flagging
// those the inputs do not reproduce — then measures the throughput of every
// built block on the chosen backends and prints how many machines each
// scenario needs at its peak: primaries = peak ÷ (measured per node ×
// -utilisation), plus replicas, with the arithmetic of every line.
//
//	go run ./benchmarks                       # embedded backends
//	go run ./benchmarks -redis 127.0.0.1:6379 -mysql 'root@tcp(127.0.0.1:3306)/'
//	go run ./benchmarks -json > plan.json
//	go run ./benchmarks -scenario benchmarks/examples.json   # your own system
//	go run ./benchmarks -only rank.add,order.create          # a subset
//	go run ./benchmarks -html report.html                    # and a page with charts
//	go run ./benchmarks -explain rank                        # one case's estimate as Markdown, measuring nothing
//	go run ./benchmarks -write-reference benchmarks/reference.json -duration 2s \
//	    -redis 127.0.0.1:6379 -mysql 'root@tcp(127.0.0.1:3306)/'   # the reference profile
//
// A measurement made on an embedded stand-in (miniredis, SQLite) sizes its
// loads from the reference profile (reference.json, embedded in the binary:
// the same measurements made on real servers), labelled as such, with the
// stand-in's own figure beside it. The binary links no SQLite (see sql.go):
// without -mysql, the measurements that need SQL do not run and are sized
// from the profile too; -tags casebook_sqlite links it. The soak under faults is a separate
// command, go run ./benchmarks/soak, so that this binary does not link the
// fault proxies.
//
// It exits 1 when a measurement fails or the run is interrupted, 2 for bad
// flags or a bad scenario file.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// quiet drops go-redis' own log lines (connection pool retries), which
// would bury the harness' one message per failure.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// run is the harness: 0 when every measurement ran, 1 when one failed or
// the run was interrupted (each said once on stderr), 2 for bad arguments.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchmarks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the plan as JSON on stdout")
	duration := fs.Duration("duration", time.Second, "how long each measurement runs (10ms..10m)")
	redisArg := fs.String("redis", os.Getenv("CASEBOOK_REDIS_ADDR"), "Redis host:port (default: a spawned redis-server, else miniredis)")
	mysqlArg := fs.String("mysql", os.Getenv("CASEBOOK_MYSQL_DSN"), "MySQL/MariaDB DSN; scratch databases are created and dropped (default: SQLite)")
	utilisation := fs.Float64("utilisation", 0.6, "share of a node's measured throughput to plan for (0 < u ≤ 1); the rest is headroom")
	scenarioArg := fs.String("scenario", "", "plan the scenarios in this JSON `file` (schema in README.md) instead of the seeds'; runs only the measurements they name")
	onlyArg := fs.String("only", "", "run only these comma-separated `measurements`, and plan only the loads they size")
	allowEmbedded := fs.Bool("allow-embedded", false, "size machines from measurements made on embedded stand-ins (miniredis, SQLite) instead of the reference profile")
	referenceArg := fs.String("reference", "", "size loads measured on embedded stand-ins from this reference profile `file` (default: the embedded benchmarks/reference.json)")
	writeRef := fs.String("write-reference", "", "run every measurement on real servers (needs -mysql; Redis may be spawned) and write them as a reference profile to this `file`")
	htmlArg := fs.String("html", "", "also write the plan as a self-contained HTML `file` with latency charts, rerunning "+
		strings.Join(sweepOps, " and ")+" (when selected) at "+fmt.Sprint(sweepWorkers)+" workers, rank Top by shards (with rank.add) and a post's fan-out by followers (with feed.read)")
	explain := fs.String("explain", "", "print the back-of-the-envelope estimate for this `block` ("+strings.Join(ExplainNames(), ", ")+") as Markdown, measuring nothing")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *explain != "" {
		if err := Explain(stdout, *explain); err != nil {
			fmt.Fprintln(stderr, "benchmarks:", err)
			return 2
		}
		return 0
	}
	switch {
	case *writeRef != "" && *mysqlArg == "":
		fmt.Fprintln(stderr, "benchmarks: -write-reference needs real servers: name -mysql (and -redis, or have redis-server on PATH)")
		return 2
	case *writeRef != "" && (*onlyArg != "" || *scenarioArg != "" || *referenceArg != "" || *allowEmbedded):
		fmt.Fprintln(stderr, "benchmarks: -write-reference runs every measurement (no -only, -scenario, -reference or -allow-embedded)")
		return 2
	case *allowEmbedded && *referenceArg != "":
		fmt.Fprintln(stderr, "benchmarks: -allow-embedded sizes from the stand-ins' own figures; -reference names a profile to size from instead: give one")
		return 2
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "benchmarks: unexpected arguments %q (flags only; see -h)\n", fs.Args())
		return 2
	case *duration < 10*time.Millisecond || *duration > 10*time.Minute:
		fmt.Fprintf(stderr, "benchmarks: -duration %v is outside 10ms..10m\n", *duration)
		return 2
	case !(*utilisation > 0 && *utilisation <= 1):
		fmt.Fprintf(stderr, "benchmarks: -utilisation %v is outside (0, 1]\n", *utilisation)
		return 2
	}
	ms, scenarios, err := selection(*scenarioArg, *onlyArg)
	if err != nil {
		fmt.Fprintln(stderr, "benchmarks:", err)
		return 2
	}
	var ref *Reference // none while writing one: the run is on real servers
	if *writeRef == "" && !*allowEmbedded {
		if ref, err = loadReference(*referenceArg); err != nil {
			fmt.Fprintln(stderr, "benchmarks: -reference:", err)
			return 2
		}
	}
	var page *pageFile
	if *htmlArg != "" {
		if page, err = createPage(*htmlArg); err != nil {
			fmt.Fprintln(stderr, "benchmarks:", err)
			return 2
		}
		defer page.discard()
	}
	redis.SetLogger(quiet{})

	env := &Env{RedisAddr: *redisArg, MySQLDSN: *mysqlArg}
	defer env.Close()
	fmt.Fprintf(stderr, "casebook capacity harness: %d measurements, %v each. %s\n", len(ms), *duration, env.Opened(ctx))
	if missing := ref.missing(ms); len(missing) > 0 {
		fmt.Fprintf(stderr, "benchmarks: the reference profile %s has no %s: on an embedded stand-in their loads are not sized\n",
			ref.Source, strings.Join(missing, ", "))
	}
	prog := newProgress(stderr)
	results := measureAll(ctx, env, ms, *duration, prog)
	var sweeps []Sweep
	if page != nil {
		sweeps = sweepAll(ctx, env, ms, *duration, prog)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "benchmarks: interrupted; no plan")
		return 1
	}
	if *writeRef != "" {
		if err := writeReference(ctx, *writeRef, env, results, *duration, referenceCommand(*writeRef, *duration, *redisArg, *mysqlArg)); err != nil {
			fmt.Fprintln(stderr, "benchmarks:", err)
			return 1
		}
		fmt.Fprintf(stderr, "benchmarks: wrote the reference profile %s (%d measurements)\n", *writeRef, len(results))
	}
	plan := makePlan(scenarios, results, *utilisation, ref)
	m := env.machine(ctx)
	plan.Machine = &m
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(plan)
	} else {
		err = plan.WriteText(stdout)
	}
	if err == nil && page != nil {
		err = page.commit(plan, sweeps)
	}
	if err != nil {
		fmt.Fprintln(stderr, "benchmarks:", err)
		return 1
	}
	var failed []string
	for _, r := range results {
		if r.Err != "" {
			failed = append(failed, r.Name+": "+r.Err)
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(stderr, "benchmarks: %d of %d measurements failed:\n  %s\n", len(failed), len(results), strings.Join(failed, "\n  "))
		return 1
	}
	return 0
}

// selection is what to measure and plan: the seeds' scenarios and every
// measurement, or a -scenario file's and the measurements it names, narrowed
// by -only to the named measurements and the loads they size.
func selection(scenarioFile, only string) ([]Measurement, []Scenario, error) {
	ms := measurements()
	var known []string
	for _, m := range ms {
		known = append(known, m.Name)
	}
	scenarios := Scenarios()
	var want map[string]bool
	if scenarioFile != "" {
		var err error
		if scenarios, err = loadScenarioFile(scenarioFile, known); err != nil {
			return nil, nil, fmt.Errorf("-scenario %s: %w", scenarioFile, err)
		}
		want = map[string]bool{}
		for _, s := range scenarios {
			for _, z := range s.Sizings {
				want[z.Measurement] = true
			}
		}
	}
	if only != "" {
		want = map[string]bool{}
		for name := range strings.SplitSeq(only, ",") {
			if name = strings.TrimSpace(name); !slices.Contains(known, name) {
				return nil, nil, fmt.Errorf("-only: unknown measurement %q (known: %s)", name, strings.Join(known, ", "))
			}
			want[name] = true
		}
	}
	if want == nil {
		return ms, scenarios, nil
	}
	ms = slices.DeleteFunc(ms, func(m Measurement) bool { return !want[m.Name] })
	var sized []Scenario
	for _, s := range scenarios {
		s.Sizings = slices.DeleteFunc(slices.Clone(s.Sizings), func(z Sizing) bool { return !want[z.Measurement] })
		if len(s.Sizings) > 0 {
			sized = append(sized, s)
		}
	}
	return ms, sized, nil
}

// referenceCommand is the command line that writes a profile like this one,
// with any password in the DSN hidden.
func referenceCommand(path string, d time.Duration, redisAddr, dsn string) string {
	cmd := "go run ./benchmarks -write-reference " + path + " -duration " + d.String()
	if redisAddr != "" {
		cmd += " -redis " + redisAddr
	}
	return cmd + " -mysql '" + redactDSN(dsn) + "'"
}

// redactDSN hides a password in a DSN.
func redactDSN(dsn string) string {
	user, rest, ok := strings.Cut(dsn, "@")
	if name, _, hasPass := strings.Cut(user, ":"); ok && hasPass {
		return name + ":***@" + rest
	}
	return dsn
}

func measureAll(ctx context.Context, env *Env, ms []Measurement, d time.Duration, p *progress) []Result {
	var out []Result
	for i, m := range ms {
		if ctx.Err() != nil {
			break
		}
		p.start(i+1, len(ms), m.Name)
		r := m.Run(ctx, env, d, 0, p.update)
		p.done(r)
		out = append(out, r)
	}
	return out
}

// progress draws one line per measurement on a terminal (redrawn in place)
// and plain start/finish lines elsewhere.
type progress struct {
	w     io.Writer
	tty   bool
	label string
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	if !ok {
		return &progress{w: w}
	}
	st, err := f.Stat()
	return &progress{w: f, tty: err == nil && st.Mode()&os.ModeCharDevice != 0}
}

func (p *progress) start(i, n int, name string) {
	p.label = fmt.Sprintf("[%d/%d] %-28s", i, n, name)
	if p.tty {
		p.update(0)
	} else {
		fmt.Fprintf(p.w, "%s measuring…\n", p.label)
	}
}

func (p *progress) update(frac float64) {
	if !p.tty {
		return
	}
	const width = 20
	filled := int(frac * width)
	bar := make([]rune, width)
	for i := range bar {
		bar[i] = '░'
		if i < filled {
			bar[i] = '█'
		}
	}
	fmt.Fprintf(p.w, "\r%s %s %3.0f%%", p.label, string(bar), frac*100)
}

func (p *progress) done(r Result) {
	status := formatRate(r.PerSec) + " " + r.Unit
	if r.ServerPerSec > 0 {
		status += " (" + formatRate(r.ServerPerSec) + " per core of server CPU)"
	}
	if r.Err != "" {
		status = "error: " + r.Err
	}
	if r.NotRun != "" {
		status = "not run: " + r.NotRun
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s %s\n", p.label, status)
	} else {
		fmt.Fprintf(p.w, "%s %s\n", p.label, status)
	}
}
