package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// Plan is the harness's output: measurements, then every scenario with its
// figures and sizings.
type Plan struct {
	Measurements []Result       `json:"measurements"`
	Scenarios    []PlanScenario `json:"scenarios"`
}

// PlanScenario is a scenario with its sizings resolved against measurements.
type PlanScenario struct {
	Scenario
	Machines []PlanSizing `json:"machines"`
}

// PlanSizing is one sizing's answer.
type PlanSizing struct {
	Sizing
	Measured float64 `json:"measured_per_sec,omitempty"`
	Machines int     `json:"machines,omitempty"`
	Note     string  `json:"note,omitempty"`
}

// makePlan sizes every scenario against the measurements; a measurement
// made on an embedded stand-in sizes nothing unless allowEmbedded.
func makePlan(scenarios []Scenario, results []Result, allowEmbedded bool) Plan {
	byName := map[string]Result{}
	for _, r := range results {
		byName[r.Name] = r
	}
	p := Plan{Measurements: results}
	for _, s := range scenarios {
		ps := PlanScenario{Scenario: s}
		for _, z := range s.Sizings {
			a := PlanSizing{Sizing: z}
			r, ok := byName[z.Measurement]
			switch {
			case !ok:
				a.Note = "not measured: block not built yet"
			case r.Err != "":
				a.Note = "measurement failed: " + r.Err
			case r.Fallback && !allowEmbedded:
				a.Measured = r.PerSec
				a.Note = "not sized: measured on an embedded stand-in (miniredis/SQLite); name real servers or pass -allow-embedded"
			default:
				a.Measured = r.PerSec
				a.Machines, _ = Machines(z.Peak, r.PerSec)
			}
			ps.Machines = append(ps.Machines, a)
		}
		p.Scenarios = append(p.Scenarios, ps)
	}
	return p
}

// WriteText prints the plan as plain tables.
func (p Plan) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASURED THROUGHPUT (this machine)\t\t\t")
	fmt.Fprintln(tw, "measurement\tper second\tunit\tbackend")
	byName := map[string]Result{}
	for _, r := range p.Measurements {
		byName[r.Name] = r
		v := formatRate(r.PerSec)
		if r.Err != "" {
			v = "error: " + r.Err
		}
		unit := r.Unit
		if b, ok := byName[r.Baseline]; ok && b.PerSec > 0 && r.Err == "" {
			unit += fmt.Sprintf(" = %.0f%% of %s", 100*r.PerSec/b.PerSec, b.Name)
		}
		backend := r.Backend
		if r.Fallback {
			backend += " (embedded stand-in)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, v, unit, backend)
	}
	fmt.Fprintln(tw)
	flagged := 0
	for _, s := range p.Scenarios {
		fmt.Fprintf(tw, "SCENARIO %s — %s\n", strings.ToUpper(s.Name), strings.Join(s.Inputs, "; "))
		fmt.Fprintln(tw, "figure\tcomputed\tseed says\tcheck")
		for _, f := range s.Figures {
			check := "ok"
			switch {
			case f.Seed == 0:
				check = "-"
			case !f.Agrees():
				check = fmt.Sprintf("FLAG: seed is %.1f× what its own inputs give", f.Ratio())
				flagged++
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Name, formatFigure(f.Value, f.Unit), formatSeed(f), check)
		}
		for _, m := range s.Machines {
			if m.Note != "" {
				fmt.Fprintf(tw, "machines for %s\t%s\t%s\t%s\n", m.What, formatFigure(m.Peak, "/s"), m.Measurement, m.Note)
				continue
			}
			fmt.Fprintf(tw, "machines for %s\t%s\t%s %s/s\t%d\n", m.What, formatFigure(m.Peak, "/s"), m.Measurement, formatRate(m.Measured), m.Machines)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "%d seed figure(s) flagged: the seed's number does not follow from the seed's inputs (shown side by side above).\n", flagged)
	return tw.Flush()
}

func formatSeed(f Figure) string {
	if f.Seed == 0 {
		return "-"
	}
	s := formatFigure(f.Seed, f.Unit)
	if f.AtLeast {
		s = "> " + s
	}
	return s
}

func formatFigure(v float64, unit string) string {
	if unit == "B" {
		return formatBytes(v)
	}
	return formatRate(v) + unit
}

// formatRate prints a count with SI suffixes and 3 significant digits.
func formatRate(v float64) string {
	for _, s := range []struct {
		div float64
		suf string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if math.Abs(v) >= s.div {
			return sig3(v/s.div) + s.suf
		}
	}
	return sig3(v)
}

func formatBytes(v float64) string {
	for _, s := range []struct {
		div float64
		suf string
	}{{PB, " PB"}, {TB, " TB"}, {GB, " GB"}, {MB, " MB"}, {KB, " KB"}} {
		if v >= s.div {
			return sig3(v/s.div) + s.suf
		}
	}
	return sig3(v) + " B"
}

func sig3(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
