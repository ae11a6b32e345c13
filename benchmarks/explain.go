package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// explainBlocks maps each -explain name to the seed scenario it explains;
// idgen and shard have no scenario of their own and gather the loads and
// data the other scenarios put on them.
var explainBlocks = map[string]string{
	"shortlink": "short link",
	"rank":      "leaderboard",
	"hotlist":   "hot list",
	"signin":    "sign-in",
	"order":     "order & pay",
	"seckill":   "flash sale",
	"redpacket": "red packet",
	"feed":      "feed",
	"shop":      "e-commerce",
	"idgen":     "",
	"shard":     "",
}

// ExplainNames lists the blocks -explain knows, sorted.
func ExplainNames() []string {
	var names []string
	for n := range explainBlocks {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Explain writes block's back-of-the-envelope estimate as a Markdown
// fragment, from the seeds' scenarios alone: nothing is measured, no server
// is needed. Storage counts the stated bytes per record on every copy.
func Explain(w io.Writer, block string) error {
	name, ok := explainBlocks[block]
	if !ok {
		return fmt.Errorf("-explain: unknown block %q (known: %s)", block, strings.Join(ExplainNames(), ", "))
	}
	var b strings.Builder
	switch block {
	case "idgen":
		explainIDs(&b)
	case "shard":
		explainShards(&b)
	default:
		i := slices.IndexFunc(Scenarios(), func(s Scenario) bool { return s.Name == name })
		explainScenario(&b, Scenarios()[i])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func explainScenario(b *strings.Builder, s Scenario) {
	fmt.Fprintf(b, "Seed scenario **%s** — inputs: %s.\n\n", s.Name, strings.Join(s.Inputs, "; "))
	b.WriteString("| figure | computed | seed says | check |\n| --- | --- | --- | --- |\n")
	for _, f := range s.Figures {
		pf := PlanFigure{Figure: f, Agrees: f.Agrees()}
		if f.Seed != 0 {
			pf.Ratio = f.Ratio()
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", f.Name, formatFigure(f.Value, f.Unit), formatSeed(f), pf.Check())
	}
	if len(s.Sizings) > 0 {
		b.WriteString("\n| load to size | peak | served by (measurement) |\n| --- | --- | --- |\n")
		for _, z := range s.Sizings {
			fmt.Fprintf(b, "| %s | %s | `%s` |\n", z.What, formatFigure(z.Peak, "/s"), z.Measurement)
		}
	}
	if len(s.Storage) > 0 {
		b.WriteString("\n| data kept | on every copy | arithmetic (stated bytes per record) |\n| --- | --- | --- |\n")
		for _, st := range s.Storage {
			ps := storageOf(st, nil, s.Replication, nil)
			fmt.Fprintf(b, "| %s | %s | %s |\n", st.What, formatBytes(ps.TotalBytes), ps.Arithmetic)
		}
	}
	writeSlips(b, []Scenario{s})
}

// writeSlips lists the seed figures the seed's own inputs do not give.
func writeSlips(b *strings.Builder, ss []Scenario) {
	var slips []string
	for _, s := range ss {
		for _, f := range s.Figures {
			if !f.Agrees() {
				slips = append(slips, fmt.Sprintf("- **%s**: the seed says %s, its own inputs give %s — the seed is %.1f× off.",
					f.Name, formatSeed(f), formatFigure(f.Value, f.Unit), f.Ratio()))
			}
		}
	}
	if len(slips) == 0 {
		b.WriteString("\nEvery seed figure follows from the seed's inputs (within 5%).\n")
		return
	}
	fmt.Fprintf(b, "\nFlagged (%d): the seed's number does not follow from its inputs.\n\n%s\n", len(slips), strings.Join(slips, "\n"))
}

// explainIDs gathers the id loads of every scenario and the code space of
// fixed-length base62 codes at the short-link seed's rate.
func explainIDs(b *strings.Builder) {
	b.WriteString("idgen has no seed scenario of its own; these are the id loads the other seeds put on it.\n\n")
	b.WriteString("| scenario | load | peak | served by (measurement) |\n| --- | --- | --- | --- |\n")
	for _, s := range Scenarios() {
		for _, z := range s.Sizings {
			if strings.HasPrefix(z.Measurement, "idgen.") {
				fmt.Fprintf(b, "| %s | %s | %s | `%s` |\n", s.Name, z.What, formatFigure(z.Peak, "/s"), z.Measurement)
			}
		}
	}
	const perDay = 1e6 // the short-link seed's links/day
	b.WriteString("\n| code length | codes (62^n) | years at 1M codes/day |\n| --- | --- | --- |\n")
	for _, n := range []int{6, 7, 11} {
		codes := math.Pow(62, float64(n))
		fmt.Fprintf(b, "| %d | %.3g | %.3g |\n", n, codes, codes/perDay/year)
	}
	fmt.Fprintf(b, "\nA 64-bit snowflake id needs %d base62 characters (62^10 < 2^64 ≤ 62^11).\n", base62Len(math.MaxUint64))
}

// base62Len is how many base62 characters v takes.
func base62Len(v uint64) int {
	n := 1
	for ; v >= 62; v /= 62 {
		n++
	}
	return n
}

// explainShards gathers the SQL data of every scenario and what one table
// holds in the layouts shard offers.
func explainShards(b *strings.Builder) {
	b.WriteString("shard has no seed scenario of its own; this is the SQL data the other seeds keep (one copy), spread over its layouts.\n\n")
	b.WriteString("| scenario | data | one copy | per table of 64 (8 × 8) | per table of 256 |\n| --- | --- | --- | --- | --- |\n")
	for _, s := range Scenarios() {
		for _, st := range s.Storage {
			if st.On != TierMySQL {
				continue
			}
			bytes := st.Bytes()
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", s.Name, st.What, formatBytes(bytes), formatBytes(bytes/64), formatBytes(bytes/256))
		}
	}
	for _, s := range Scenarios() {
		for _, f := range s.Figures {
			if f.Name == "sale peak DB writes" {
				fmt.Fprintf(b, "\nThe %s seed's %s: %s — %s per database of 8, %s per table of 64.\n", s.Name, f.Name,
					formatFigure(f.Value, f.Unit), formatFigure(f.Value/8, f.Unit), formatFigure(f.Value/64, f.Unit))
			}
		}
	}
}
