package main

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sweepOps are the measurements the HTML report reruns at each of
// sweepWorkers, when selected, to show how throughput and latency grow
// with concurrency. Both are Redis-bound and their ops are safe at any
// concurrency.
var (
	sweepOps     = []string{"rank.add", "seckill.buy.batched"}
	sweepWorkers = []int{1, 4, 16, 64}
)

// Sweep is one measurement run at several concurrencies, or at several
// sizes of its work (workSweeps).
type Sweep struct {
	Name   string
	Unit   string
	Axis   string   // "workers", or what Xs count
	Xs     []int    // one per point
	Points []Result // one per X, in order
}

// sweepAll reruns the selected sweepOps at every sweepWorkers, and the
// workSweeps whose measurement is selected at each of their sizes, for d
// each.
func sweepAll(ctx context.Context, env *Env, ms []Measurement, d time.Duration, p *progress) []Sweep {
	type run struct {
		s       Sweep
		measure func(x int) Result
	}
	var todo []run
	n := 0
	for _, m := range ms {
		if slices.Contains(sweepOps, m.Name) {
			todo = append(todo, run{Sweep{Name: m.Name, Unit: m.Unit, Axis: "workers", Xs: sweepWorkers},
				func(w int) Result { return m.Run(ctx, env, d, w, p.update) }})
			n += len(sweepWorkers)
		}
	}
	for _, w := range workSweeps {
		if slices.ContainsFunc(ms, func(m Measurement) bool { return m.Name == w.SelectedBy }) {
			todo = append(todo, run{Sweep{Name: w.Name, Unit: w.Unit, Axis: w.Axis, Xs: w.Xs},
				func(x int) Result { return w.Make(x).Run(ctx, env, d, 0, p.update) }})
			n += len(w.Xs)
		}
	}
	var out []Sweep
	i := 0
	for _, t := range todo {
		s := t.s
		for _, x := range s.Xs {
			if ctx.Err() != nil {
				return out
			}
			i++
			p.start(i, n, s.Name+" at "+countOf(x, s.Axis))
			r := t.measure(x)
			p.done(r)
			s.Points = append(s.Points, r)
		}
		out = append(out, s)
	}
	return out
}

// pageFile is the -html output: a temporary file beside the page, renamed
// over it once the page is written, so that a run that fails or is
// interrupted leaves no half page, and an unwritable path is refused
// before anything is measured.
type pageFile struct {
	path string
	tmp  *os.File
}

func createPage(path string) (*pageFile, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("-html %s is a directory", path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("-html %s: %w", path, err)
	}
	return &pageFile{path: path, tmp: tmp}, nil
}

// commit writes the page and puts it in place.
func (f *pageFile) commit(plan Plan, sweeps []Sweep) error {
	err := plan.WriteHTML(f.tmp, sweeps)
	if err == nil {
		err = f.tmp.Chmod(0o644)
	}
	if cerr := f.tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.tmp.Name(), f.path)
	}
	if err != nil {
		os.Remove(f.tmp.Name())
	}
	return err
}

// discard removes the temporary file of a page never written.
func (f *pageFile) discard() {
	f.tmp.Close()
	os.Remove(f.tmp.Name())
}

//go:embed report.html.tmpl
var templates embed.FS

var pageTemplate = template.Must(template.New("report.html.tmpl").Funcs(template.FuncMap{
	"rate":    formatRate,
	"figure":  formatFigure,
	"seed":    formatSeed,
	"bytes":   formatBytes,
	"micros":  formatMicros,
	"percent": percent,
}).ParseFS(templates, "report.html.tmpl"))

// page is what the template sees.
type page struct {
	Plan
	Generated    string
	Rows         []measurementRow
	Sweeps       []sweepView
	SweepOps     []string
	SweepWorkers []int
}

type measurementRow struct {
	Result
	Rate, UnitText, BackendText string
	Chart                       template.HTML
}

type sweepView struct {
	Sweep
	Throughput, Latency template.HTML
}

// WriteHTML writes the plan as one self-contained page: its tables, each
// measurement's latency distribution, and the concurrency sweeps.
func (p Plan) WriteHTML(w io.Writer, sweeps []Sweep) error {
	v := page{Plan: p, Generated: time.Now().Format(time.RFC3339), SweepOps: sweepOps, SweepWorkers: sweepWorkers}
	byName := map[string]Result{}
	for _, r := range p.Measurements {
		byName[r.Name] = r
		v.Rows = append(v.Rows, measurementRow{Result: r, Rate: r.rateText(), UnitText: r.unitText(byName),
			BackendText: r.backendText(), Chart: distributionChart(r).svg()})
	}
	for _, s := range sweeps {
		tp, lat := sweepCharts(s)
		v.Sweeps = append(v.Sweeps, sweepView{Sweep: s, Throughput: tp.svg(), Latency: lat.svg()})
	}
	return pageTemplate.Execute(w, v)
}

// distributionChart plots a result's latency against its percentile, the
// x axis in "nines" (90%, 99%, 99.9%, …) so that the tail gets the room.
func distributionChart(r Result) chart {
	nines := func(p float64) float64 { return -math.Log10(1 - p/100) }
	var pts [][2]float64
	for i, d := range r.Distribution {
		x := 0.0
		switch {
		case d.Percentile < 100:
			x = nines(d.Percentile)
		case i > 0:
			x = pts[i-1][0] + 0.1 // the max, just past the last percentile
		}
		pts = append(pts, [2]float64{x, d.Micros})
	}
	c := chart{Title: r.Name, XLabel: "percentile of ops", YLabel: "latency per op", YLog: true, YFormat: formatMicros,
		Series: []series{{Name: "latency", Points: pts}}}
	for i, label := range []string{"0%", "90%", "99%", "99.9%", "99.99%", "99.999%"} {
		if len(pts) > 0 && float64(i) <= pts[len(pts)-1][0] {
			c.XTicks = append(c.XTicks, tick{float64(i), label})
		}
	}
	return c
}

// sweepCharts plots a sweep's throughput and its p50 and p99 latency
// against its axis (log2: 1, 4, 16, 64 or 100, 1,000, 10,000 evenly).
func sweepCharts(s Sweep) (throughput, latency chart) {
	throughput = chart{Title: s.Name + ": throughput", XLabel: s.Axis, YLabel: "per second", YFormat: formatRate}
	latency = chart{Title: s.Name + ": latency per op", XLabel: s.Axis, YLabel: "latency", YLog: true, YFormat: formatMicros}
	var rate, p50, p99 series
	rate.Name, p50.Name, p99.Name = "per second", "p50", "p99"
	for i, r := range s.Points {
		x := math.Log2(float64(s.Xs[i]))
		throughput.XTicks = append(throughput.XTicks, tick{x, intText(s.Xs[i])})
		if r.Err != "" {
			continue
		}
		rate.Points = append(rate.Points, [2]float64{x, r.PerSec})
		if r.Latency != nil {
			p50.Points = append(p50.Points, [2]float64{x, r.Latency.P50})
			p99.Points = append(p99.Points, [2]float64{x, r.Latency.P99})
		}
	}
	latency.XTicks = throughput.XTicks
	throughput.Series = []series{rate}
	latency.Series = []series{p50, p99}
	return throughput, latency
}

// intText prints a count as an integer, with thousands separators: an axis
// of workers reads 1, 4, 16, 64.
func intText(n int) string {
	if n < 1000 && n > -1000 {
		return strconv.Itoa(n)
	}
	return commas(float64(n))
}

// countOf is n of a plural noun: "1 worker", "16 workers".
func countOf(n int, plural string) string {
	if n == 1 {
		plural = strings.TrimSuffix(plural, "s")
	}
	return intText(n) + " " + plural
}
