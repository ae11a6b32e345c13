package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// model states the sizing arithmetic, in the report and in the JSON.
const model = "machines = ceil(peak ÷ (measured per-node throughput × utilisation)) primaries, " +
	"plus each primary's replicas on Redis and MySQL; storage = records × bytes per record × (1 + replicas), " +
	"bytes per record as measured (MEMORY USAGE of what a measurement stored) where one was, else as stated; " +
	"a measurement made on an embedded stand-in is replaced by the reference profile's, made on real servers"

// Plan is the harness's output: measurements, then every scenario with its
// figures, sizings and storage.
type Plan struct {
	Model       string  `json:"model"`
	Utilisation float64 `json:"utilisation"`
	// Reference is the profile that sized the loads measured on embedded
	// stand-ins; absent when none was (real servers, or -allow-embedded).
	Reference    *ReferenceInfo `json:"reference,omitempty"`
	Measurements []Result       `json:"measurements"`
	Scenarios    []PlanScenario `json:"scenarios"`
}

// PlanScenario is a scenario with its figures checked and its sizings and
// storage resolved against the measurements.
type PlanScenario struct {
	Name        string        `json:"name"`
	Inputs      []string      `json:"inputs"`
	Replication Replication   `json:"replication"`
	Figures     []PlanFigure  `json:"figures"`
	Sizings     []PlanSizing  `json:"sizings"`
	Storage     []PlanStorage `json:"storage,omitempty"`
}

// PlanFigure is a figure with its verdict: Ratio is the seed's figure over
// the computed one, absent when the seed gives none.
type PlanFigure struct {
	Figure
	Agrees bool    `json:"agrees"`
	Ratio  float64 `json:"ratio,omitempty"`
}

// PlanSizing is one load's answer. Size is absent when the load could not
// be sized, and Note says why.
type PlanSizing struct {
	Sizing
	Tier Tier `json:"tier,omitempty"`
	// Basis says where PerNode comes from: BasisMeasured (this run) or
	// BasisReference (the profile's, labelled by Reference, the run's own
	// figure on the stand-in being LivePerSec).
	Basis      string  `json:"basis,omitempty"`
	Reference  string  `json:"reference,omitempty"`
	PerNode    float64 `json:"measured_per_sec,omitempty"`
	LivePerSec float64 `json:"live_per_sec,omitempty"`
	Size       *Size   `json:"size,omitempty"`
	Arithmetic string  `json:"arithmetic,omitempty"`
	Note       string  `json:"note,omitempty"`
}

// PlanStorage is a scenario's data on every copy.
type PlanStorage struct {
	Storage
	// Basis says where BytesPerRecord comes from: BasisMeasured (this
	// run's footprint), BasisReference (the profile's, labelled by
	// Reference) or BasisStated.
	Basis     string `json:"basis"`
	Reference string `json:"reference,omitempty"`
	// Measured is the footprint BytesPerRecord was taken from (the stated
	// figure is then StatedBytesPerRecord); absent when it is as stated.
	Measured             *Footprint `json:"measured,omitempty"`
	StatedBytesPerRecord float64    `json:"stated_bytes_per_record,omitempty"`
	Bytes                float64    `json:"bytes"`       // one copy
	TotalBytes           float64    `json:"total_bytes"` // primaries and replicas
	Arithmetic           string     `json:"arithmetic"`
	Note                 string     `json:"note,omitempty"`
}

// Bases of a sizing or a storage line: what its per-node figure or bytes
// per record come from.
const (
	BasisMeasured  = "measured"  // this run's measurement
	BasisReference = "reference" // the reference profile's, the measurement having run on a stand-in
	BasisStated    = "stated"    // storage only: the scenario's stated bytes per record
)

// makePlan sizes every scenario against the measurements at utilisation. A
// measurement made on an embedded stand-in sizes from ref's figure for it
// instead, labelled; with ref nil (-allow-embedded) the stand-in's own
// figure is the basis.
func makePlan(scenarios []Scenario, results []Result, utilisation float64, ref *Reference) Plan {
	byName := map[string]Result{}
	usesRef := false
	for _, r := range results {
		byName[r.Name] = r
		usesRef = usesRef || r.Fallback
	}
	p := Plan{Model: model, Utilisation: utilisation, Measurements: results}
	if usesRef && ref != nil {
		p.Reference = ref.info(results)
	}
	for _, s := range scenarios {
		ps := PlanScenario{Name: s.Name, Inputs: s.Inputs, Replication: s.Replication}
		for _, f := range s.Figures {
			pf := PlanFigure{Figure: f, Agrees: f.Agrees()}
			if f.Seed != 0 {
				pf.Ratio = f.Ratio()
			}
			ps.Figures = append(ps.Figures, pf)
		}
		for _, z := range s.Sizings {
			ps.Sizings = append(ps.Sizings, sizeLoad(z, byName, s.Replication, utilisation, ref))
		}
		for _, st := range s.Storage {
			ps.Storage = append(ps.Storage, storageOf(st, byName, s.Replication, ref))
		}
		p.Scenarios = append(p.Scenarios, ps)
	}
	return p
}

func sizeLoad(z Sizing, byName map[string]Result, repl Replication, utilisation float64, ref *Reference) PlanSizing {
	a := PlanSizing{Sizing: z}
	r, ok := byName[z.Measurement]
	switch {
	case !ok:
		a.Note = "not measured: block not built yet"
		return a
	case r.Err != "":
		a.Note = "measurement failed: " + r.Err
		return a
	}
	if r.NotRun != "" && ref == nil {
		a.Note = "not sized: " + r.Name + " did not run: " + r.NotRun
		return a
	}
	basis, label := r, ""
	a.Basis = BasisMeasured
	if r.Fallback {
		label = "measured on the embedded stand-in " + r.Backend + ", by -allow-embedded"
		if ref != nil {
			refR, ok := ref.lookup(r.Name)
			if !ok {
				ran := "ran on an embedded stand-in (" + r.Backend + ")"
				if r.NotRun != "" {
					ran = "did not run (" + r.NotRun + ")"
				}
				a.Note = fmt.Sprintf("not sized: %s %s, and the reference profile %s has no %s; "+
					"name real servers, pass -allow-embedded, or write a complete profile with -write-reference", r.Name, ran, ref.Source, r.Name)
				return a
			}
			basis, label = refR, ref.label(r.Tier)
			a.Basis, a.Reference, a.LivePerSec = BasisReference, label, perNode(r)
			if r.NotRun != "" {
				label += "; not measured here: " + r.NotRun
			} else {
				label += "; live on " + r.Backend + ": " + formatRate(perNode(r)) + "/s, not the basis"
			}
		}
	}
	// A measurement that reads its server's CPU time is sized by it: the
	// clients of this run shared the machine with the server.
	per, unit := basis.PerSec, ""
	if basis.ServerPerSec > 0 {
		per, unit = basis.ServerPerSec, " per core of server CPU"
	}
	a.Tier, a.PerNode = r.Tier, per
	size, ok := SizeFor(z.Peak, per, utilisation, repl.of(r.Tier))
	if !ok {
		a.Note = "not sized: nothing measured"
		return a
	}
	a.Size = &size
	a.Arithmetic = fmt.Sprintf("%s/s ÷ (%s/s%s × %s) %s → %s", commas(z.Peak), commas(per), unit, percent(utilisation),
		exact(size.Exact), machinesPhrase(r.Tier, size, repl.of(r.Tier)))
	if label != "" {
		a.Arithmetic += " (" + label + ")"
	}
	return a
}

// perNode is what one node of r's tier serves: per core of server CPU where
// r read it, else the rate this machine served.
func perNode(r Result) float64 {
	if r.ServerPerSec > 0 {
		return r.ServerPerSec
	}
	return r.PerSec
}

func machinesPhrase(t Tier, s Size, perPrimary int) string {
	switch t {
	case TierRedis, TierMySQL:
		name := map[Tier]string{TierRedis: "Redis", TierMySQL: "MySQL"}[t]
		primaries := plural(s.Primaries, name+" primary", name+" primaries")
		if perPrimary == 0 {
			return primaries + ", no replicas"
		}
		return fmt.Sprintf("%s + %s = %d machines", primaries, plural(s.Replicas, "replica", "replicas"), s.Machines)
	}
	return plural(s.Primaries, "app node", "app nodes")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// exact prints a machine count before rounding up, with its relation: one
// decimal, or two significant digits below 1 so that a small load does not
// read as 0.
func exact(x float64) string {
	switch {
	case x < 0.001:
		return "< 0.001"
	case x < 1:
		return "= " + strconv.FormatFloat(x, 'g', 2, 64)
	}
	return "= " + strconv.FormatFloat(x, 'f', 1, 64)
}

// storageOf sizes st's data on every copy, from the bytes per record its
// measurement's footprint shows when there is a usable one: this run's on
// a real server, else the reference profile's, else the stated figure.
func storageOf(st Storage, byName map[string]Result, repl Replication, ref *Reference) PlanStorage {
	copies := 1 + repl.of(st.On)
	ps := PlanStorage{Storage: st, Basis: BasisStated}
	if r, ok := byName[st.MeasuredBy]; ok && st.MeasuredBy != "" {
		use := func(f Footprint, basis, label string) {
			ps.Basis, ps.Measured, ps.StatedBytesPerRecord, ps.BytesPerRecord = basis, &f, st.BytesPerRecord, f.PerRecord()
			ps.Note = fmt.Sprintf("measured by %s: %s B over %s records (%s)%s; stated %s B", st.MeasuredBy,
				commas(f.Bytes), commas(f.Records), f.How, label, commas(st.BytesPerRecord))
		}
		live := r.Footprint != nil && (!r.Fallback || ref == nil)
		why := "" // why this run's footprint is not the basis
		switch {
		case live && r.Fallback:
			use(*r.Footprint, BasisMeasured, " on the embedded stand-in "+r.Backend+", by -allow-embedded")
		case live:
			use(*r.Footprint, BasisMeasured, "")
		case r.Footprint != nil:
			why = st.MeasuredBy + " ran on an embedded stand-in (" + r.Backend + ")"
		default:
			why = cmp.Or(r.FootprintErr, r.Err, r.NotRun, "the measurement sampled nothing")
		}
		if why != "" {
			if refR, ok := ref.lookup(st.MeasuredBy); ok && refR.Footprint != nil {
				use(*refR.Footprint, BasisReference, ", "+ref.label(st.On))
				ps.Reference = ref.label(st.On)
				ps.Note += " — this run's: " + why
			} else {
				ps.Note = "bytes per record as stated: " + why
				if ref != nil {
					ps.Note += ", and the reference profile has no footprint of " + st.MeasuredBy
				}
			}
		}
	}
	ps.Bytes = ps.Storage.Bytes()
	ps.TotalBytes = ps.Bytes * float64(copies)
	records := formatRate(st.Records)
	if st.Records == 0 {
		records = fmt.Sprintf("%s/day × %s d", formatRate(st.PerDay), commas(st.RetentionDays))
	}
	where := map[Tier]string{TierRedis: "Redis memory", TierMySQL: "MySQL disk"}[st.On]
	ps.Arithmetic = fmt.Sprintf("%s × %s B = %s × %d copies = %s of %s", records, commas(ps.BytesPerRecord),
		formatBytes(ps.Bytes), copies, formatBytes(ps.TotalBytes), where)
	return ps
}

// WriteText prints the plan as plain tables.
func (p Plan) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SIZING MODEL: %s; utilisation %s.\n", model, percent(p.Utilisation))
	if p.Reference != nil {
		fmt.Fprintf(tw, "REFERENCE PROFILE: %s\n", p.Reference.Summary())
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "MEASURED THROUGHPUT (this machine)\t\t\t")
	fmt.Fprintln(tw, "measurement\tper second\tunit\tbackend\tworkers\tlatency p50\tp99\tp99.9\tmax")
	byName := map[string]Result{}
	for _, r := range p.Measurements {
		byName[r.Name] = r
		workers := "-"
		if r.Workers > 0 {
			workers = strconv.Itoa(r.Workers)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.rateText(), r.unitText(byName), r.backendText(), workers, latencyColumns(r))
	}
	fmt.Fprintln(tw)
	flagged, seeded := 0, 0
	for _, s := range p.Scenarios {
		fmt.Fprintf(tw, "SCENARIO %s — %s; replicas per primary: Redis %d, MySQL %d\n",
			strings.ToUpper(s.Name), strings.Join(s.Inputs, "; "), s.Replication.Redis, s.Replication.MySQL)
		fmt.Fprintln(tw, "figure\tcomputed\tseed says\tcheck")
		for _, f := range s.Figures {
			if f.Seed != 0 {
				seeded++
				if !f.Agrees {
					flagged++
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Name, formatFigure(f.Value, f.Unit), formatSeed(f.Figure), f.Check())
		}
		for _, m := range s.Sizings {
			fmt.Fprintf(tw, "machines for %s\t%s\t%s\t%s\n", m.What, formatFigure(m.Peak, "/s"), m.Measurement, m.Answer())
		}
		for _, st := range s.Storage {
			arithmetic := st.Arithmetic
			if st.Note != "" {
				arithmetic += " — " + st.Note
			}
			fmt.Fprintf(tw, "storage: %s\t%s\t\t%s\n", st.What, formatBytes(st.TotalBytes), arithmetic)
		}
		fmt.Fprintln(tw)
	}
	if seeded > 0 {
		fmt.Fprintf(tw, "%d seed figure(s) flagged: the seed's number does not follow from the seed's inputs (shown side by side above).\n", flagged)
	}
	return tw.Flush()
}

// Summary says what the profile is, for the report's head.
func (in *ReferenceInfo) Summary() string {
	s := fmt.Sprintf("loads measured here on embedded stand-ins are sized from %s: Redis %s and %s on %d cores (%s, %s), %s, %s, %s per measurement, made by `%s`",
		in.Source, in.Redis, sqlProduct(in.MySQL), in.Machine.Cores, in.Machine.CPU, in.Machine.OS, in.Go, in.Date, in.Duration, in.Command)
	if len(in.Missing) > 0 {
		s += "; it has no " + strings.Join(in.Missing, ", ") + " (their loads are not sized)"
	}
	return s + "."
}

// rateText is a result's throughput, or its error.
func (r Result) rateText() string {
	switch {
	case r.Err != "":
		return "error: " + r.Err
	case r.NotRun != "":
		return "not run: " + r.NotRun
	}
	return formatRate(r.PerSec)
}

// unitText is a result's unit, and its share of its baseline's rate.
func (r Result) unitText(byName map[string]Result) string {
	if b, ok := byName[r.Baseline]; ok && b.PerSec > 0 && r.Err == "" && r.NotRun == "" {
		return r.Unit + fmt.Sprintf(" = %.0f%% of %s", 100*r.PerSec/b.PerSec, b.Name)
	}
	return r.Unit
}

func (r Result) backendText() string {
	if r.NotRun != "" {
		return r.Backend
	}
	if r.Fallback {
		return r.Backend + " (embedded stand-in)"
	}
	return r.Backend
}

// Check is a figure's verdict: "-" when the seed gives none.
func (f PlanFigure) Check() string {
	switch {
	case f.Seed == 0:
		return "-"
	case !f.Agrees:
		return fmt.Sprintf("FLAG: seed is %.1f× what its own inputs give", f.Ratio)
	}
	return "ok"
}

// Answer is a sizing's arithmetic, or why there is none.
func (z PlanSizing) Answer() string {
	if z.Note != "" {
		return z.Note
	}
	return z.Arithmetic
}

// latencyColumns prints a result's latency percentiles as four columns, the
// last saying how many units one op is when it is a batch.
func latencyColumns(r Result) string {
	l := r.Latency
	if l == nil {
		return "-\t-\t-\t-"
	}
	cols := formatMicros(l.P50) + "\t" + formatMicros(l.P99) + "\t" + formatMicros(l.P999) + "\t" + formatMicros(l.Max)
	if r.Batch > 1 {
		cols += fmt.Sprintf(" (an op is a batch of %d)", r.Batch)
	}
	return cols
}

// formatMicros prints a duration given in microseconds with 3 significant
// digits and its unit: "41.0ns", "12.3µs", "1.20ms", "2.10s".
func formatMicros(us float64) string {
	switch {
	case us < 1:
		return sig3(us*1e3) + "ns"
	case us < 1e3:
		return sig3(us) + "µs"
	case us < 1e6:
		return sig3(us/1e3) + "ms"
	}
	return sig3(us/1e6) + "s"
}

// commas prints v with thousands separators ("6,944"), and small values
// with 3 significant digits.
func commas(v float64) string {
	if math.Abs(v) < 100 {
		return sig3(v)
	}
	digits := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	var b strings.Builder
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 && digits[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func percent(u float64) string { return strconv.FormatFloat(100*u, 'f', -1, 64) + "%" }

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
