package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
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
	Reference *ReferenceInfo `json:"reference,omitempty"`
	// Summary is every scenario's machines, first in every form of the
	// report; Machine what measured.
	Summary      []ScenarioSummary `json:"summary"`
	Machine      *RunMachine       `json:"machine,omitempty"`
	Measurements []Result          `json:"measurements"`
	Scenarios    []PlanScenario    `json:"scenarios"`
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
	// SizedBy lists the sizings that answer this figure (their What).
	SizedBy []string `json:"sized_by,omitempty"`
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
			for _, z := range s.Sizings {
				if z.Answers == f.Name {
					pf.SizedBy = append(pf.SizedBy, z.What)
				}
			}
			if f.Unit == "/s" && len(pf.SizedBy) == 0 && pf.NotSized == "" && strings.HasPrefix(f.Name, "avg ") {
				pf.NotSized = "an average: its load is sized at the peak"
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
	p.Summary = summariseScenarios(p.Scenarios)
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

// textWidth is the width the text report fits: every line of it is at
// most this many columns (runes).
const textWidth = 120

// WriteText prints the plan as plain tables: the summary, the machine that
// measured, the sizing model, the measurements, then each scenario.
func (p Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	table := func(rows [][]string) {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		tw.Flush()
	}
	para := func(indent, text string) { b.WriteString(wrap(text, textWidth, indent)) }

	fmt.Fprintf(&b, "CAPACITY PLAN at %s utilisation (Redis and MySQL machines are primaries + replicas)\n", percent(p.Utilisation))
	rows := [][]string{{"scenario", "Redis", "MySQL", "app", "machines", "binding load", "headroom"}}
	for _, s := range p.Summary {
		binding := s.Binding
		if s.Unsized > 0 {
			binding += fmt.Sprintf(" [%d not sized]", s.Unsized)
		}
		rows = append(rows, []string{s.Scenario, s.TierText(TierRedis), s.TierText(TierMySQL), s.TierText(TierApp),
			strconv.Itoa(s.Machines), binding, s.HeadroomText()})
	}
	rows = append(rows, []string{"all scenarios", "", "", "", strconv.Itoa(p.TotalMachines()), "", ""})
	table(rows)
	para("", "A scenario's loads on one tier share its machines: its primaries are ceil(Σ of the loads' exact counts). "+
		"Headroom: how much the binding tier's loads can grow before it needs another primary.")
	b.WriteString("\n")
	if p.Machine != nil {
		para("", "MEASURED ON: "+p.Machine.Text())
	}
	if p.Reference != nil {
		para("", "REFERENCE PROFILE: "+p.Reference.Summary())
	}
	para("", fmt.Sprintf("SIZING MODEL: %s; utilisation %s.", model, percent(p.Utilisation)))
	b.WriteString("\n")

	b.WriteString("MEASURED THROUGHPUT (this machine; per server core where the server's CPU time was read)\n")
	rows = [][]string{{"measurement", "per second", "per server core", "workers", "batch", "latency p50", "p99", "p99.9", "max"}}
	byName := map[string]Result{}
	for _, r := range p.Measurements {
		byName[r.Name] = r
		workers, batch, core := "-", "-", "-"
		if r.Workers > 0 {
			workers = strconv.Itoa(r.Workers)
		}
		if r.Batch > 1 {
			batch = strconv.Itoa(r.Batch)
		}
		if r.ServerPerSec > 0 {
			core = formatRate(r.ServerPerSec)
		}
		rate := formatRate(r.PerSec)
		switch {
		case r.Err != "":
			rate = "error"
		case r.NotRun != "":
			rate = "not run"
		}
		rows = append(rows, append([]string{r.Name, rate, core, workers, batch}, strings.Split(latencyColumns(r), "\t")...))
	}
	table(rows)
	b.WriteString("what each one measured:\n")
	for _, r := range p.Measurements {
		text := r.Name + ": " + r.unitText(byName) + "; on " + r.backendText()
		if r.Batch > 1 {
			text += fmt.Sprintf("; an op is a batch of %d, its latency the batch's", r.Batch)
		}
		switch {
		case r.Err != "":
			text += "; error: " + r.Err
		case r.NotRun != "":
			text += "; not run: " + r.NotRun
		case r.ServerCPU != "":
			text += "; " + r.ServerCPU
		}
		para("  ", text)
	}
	b.WriteString("\n")

	flagged, seeded := 0, 0
	for _, s := range p.Scenarios {
		para("", fmt.Sprintf("SCENARIO %s — %s; replicas per primary: Redis %d, MySQL %d",
			strings.ToUpper(s.Name), strings.Join(s.Inputs, "; "), s.Replication.Redis, s.Replication.MySQL))
		rows = [][]string{{"figure", "computed", "seed says", "check"}}
		for _, f := range s.Figures {
			if f.Seed != 0 {
				seeded++
				if !f.Agrees {
					flagged++
				}
			}
			rows = append(rows, []string{f.Name, formatFigure(f.Value, f.Unit), formatSeed(f.Figure), f.Check()})
		}
		table(rows)
		for _, f := range s.Figures {
			if f.NotSized != "" && !strings.HasPrefix(f.Name, "avg ") {
				para("  ", "no sizing of its own: "+f.Name+" — "+f.NotSized)
			}
		}
		for _, m := range s.Sizings {
			para("", fmt.Sprintf("machines for %s [figure: %s] on %s:", m.What, m.Answers, m.Measurement))
			para("    ", m.Answer())
		}
		for _, st := range s.Storage {
			para("", fmt.Sprintf("storage: %s: %s", st.What, formatBytes(st.TotalBytes)))
			arithmetic := st.Arithmetic
			if st.Note != "" {
				arithmetic += " — " + st.Note
			}
			para("    ", arithmetic)
		}
		b.WriteString("\n")
	}
	if seeded > 0 {
		para("", fmt.Sprintf("%d seed figure(s) flagged: the seed's number does not follow from the seed's inputs (shown side by side above).", flagged))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// wrap breaks text into lines of at most width runes at spaces, each
// starting with indent (a word longer than a line stays whole), and ends
// every line with a newline.
func wrap(text string, width int, indent string) string {
	var b strings.Builder
	line, fresh := indent, true
	for _, word := range strings.Fields(text) {
		if !fresh && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > width {
			b.WriteString(line + "\n")
			line, fresh = indent+"  ", true
		}
		if !fresh {
			line += " "
		}
		line += word
		fresh = false
	}
	b.WriteString(line + "\n")
	return b.String()
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

// latencyColumns prints a result's latency percentiles as four columns.
func latencyColumns(r Result) string {
	l := r.Latency
	if l == nil {
		return "-\t-\t-\t-"
	}
	return formatMicros(l.P50) + "\t" + formatMicros(l.P99) + "\t" + formatMicros(l.P999) + "\t" + formatMicros(l.Max)
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
