// Command benchmarks is casebook's capacity-planning harness.
//
// It takes the seeds' scenarios (DAU, actions per user, peak window and
// factor, bytes per record), computes average and peak QPS and storage from
// them — printing the seed's own figure beside each computed one and flagging
// those the inputs do not reproduce — then measures the throughput of every
// built block on the chosen backends and prints how many machines each
// scenario needs at its peak.
//
//	go run ./benchmarks                       # embedded backends
//	go run ./benchmarks -redis 127.0.0.1:6379 -mysql 'root@tcp(127.0.0.1:3306)/'
//	go run ./benchmarks -json > plan.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

func main() {
	var (
		asJSON   = flag.Bool("json", false, "print the plan as JSON on stdout")
		duration = flag.Duration("duration", time.Second, "how long each measurement runs")
		redisArg = flag.String("redis", os.Getenv("CASEBOOK_REDIS_ADDR"), "Redis host:port (default: a spawned redis-server, else miniredis)")
		mysqlArg = flag.String("mysql", os.Getenv("CASEBOOK_MYSQL_DSN"), "MySQL/MariaDB DSN; a scratch database is created and dropped (default: SQLite)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	env := &Env{RedisAddr: *redisArg, MySQLDSN: *mysqlArg}
	defer env.Close()
	results := measureAll(ctx, env, measurements(), *duration, newProgress(os.Stderr))
	plan := makePlan(Scenarios(), results)
	var err error
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(plan)
	} else {
		err = plan.WriteText(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks:", err)
		os.Exit(1)
	}
}

func measureAll(ctx context.Context, env *Env, ms []Measurement, d time.Duration, p *progress) []Result {
	var out []Result
	for i, m := range ms {
		p.start(i+1, len(ms), m.Name)
		r := m.Run(ctx, env, d, p.update)
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

func newProgress(f *os.File) *progress {
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
	if r.Err != "" {
		status = "error: " + r.Err
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s %s\n", p.label, status)
	} else {
		fmt.Fprintf(p.w, "%s %s\n", p.label, status)
	}
}
