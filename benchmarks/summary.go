package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/casebook-dev/casebook/internal/devcore"
)

// ScenarioSummary is a scenario's answer in one row: the machines each
// tier needs for all of the scenario's loads on it, the load that binds,
// and how far the peak can grow before the binding tier needs another
// primary.
type ScenarioSummary struct {
	Scenario string         `json:"scenario"`
	Tiers    []TierMachines `json:"tiers"`
	Machines int            `json:"machines"` // every tier's, in all
	// Binding is the sizing that takes the most of its tier's primaries
	// (its What and measurement); Headroom is how much every load of that
	// tier can grow (0.25 = 25%) before the tier needs another primary, at
	// the plan's utilisation.
	Binding  string  `json:"binding,omitempty"`
	Headroom float64 `json:"headroom"`
	// Unsized counts the scenario's loads that have no size (each sizing
	// line says why).
	Unsized int `json:"unsized,omitempty"`
}

// TierMachines is one tier of a scenario: its loads share the machines, so
// primaries = ceil(Σ exact) of those loads, plus each primary's replicas.
type TierMachines struct {
	Tier      Tier    `json:"tier"`
	Exact     float64 `json:"exact"`
	Primaries int     `json:"primaries"`
	Replicas  int     `json:"replicas"`
	Machines  int     `json:"machines"`
}

// summariseScenarios totals each scenario's sizings by tier.
func summariseScenarios(scenarios []PlanScenario) []ScenarioSummary {
	var out []ScenarioSummary
	for _, s := range scenarios {
		sum := ScenarioSummary{Scenario: s.Name}
		byTier := map[Tier]*TierMachines{}
		bindingExact := map[Tier]float64{}
		binding := map[Tier]string{}
		for _, z := range s.Sizings {
			if z.Size == nil {
				sum.Unsized++
				continue
			}
			tm := byTier[z.Tier]
			if tm == nil {
				tm = &TierMachines{Tier: z.Tier}
				byTier[z.Tier] = tm
			}
			tm.Exact += z.Size.Exact
			if z.Size.Exact > bindingExact[z.Tier] || binding[z.Tier] == "" {
				bindingExact[z.Tier], binding[z.Tier] = z.Size.Exact, z.What+" ("+z.Measurement+")"
			}
		}
		var bindTier Tier
		for _, t := range []Tier{TierRedis, TierMySQL, TierApp} {
			tm := byTier[t]
			if tm == nil {
				continue
			}
			size, _ := SizeFor(tm.Exact, 1, 1, s.Replication.of(t)) // Exact primaries at full use of one
			tm.Primaries, tm.Replicas, tm.Machines = size.Primaries, size.Replicas, size.Machines
			sum.Tiers = append(sum.Tiers, *tm)
			sum.Machines += tm.Machines
			// The binding tier is the one nearest to needing another primary
			// per primary it has: the fullest.
			if bindTier == "" || tm.Exact/float64(tm.Primaries) > byTier[bindTier].Exact/float64(byTier[bindTier].Primaries) {
				bindTier = t
			}
		}
		if bindTier != "" {
			tm := byTier[bindTier]
			sum.Binding = binding[bindTier]
			sum.Headroom = float64(tm.Primaries)/math.Max(tm.Exact, 1e-9) - 1
		}
		out = append(out, sum)
	}
	return out
}

// TotalMachines is every scenario's machines, in all.
func (p Plan) TotalMachines() int {
	n := 0
	for _, s := range p.Summary {
		n += s.Machines
	}
	return n
}

// TierText is a tier's machines for the summary (and the HTML template): "2 + 2" (primaries +
// replicas) or "1" for app nodes, "-" when the scenario has none.
func (s ScenarioSummary) TierText(t Tier) string {
	i := slices.IndexFunc(s.Tiers, func(tm TierMachines) bool { return tm.Tier == t })
	if i < 0 {
		return "-"
	}
	tm := s.Tiers[i]
	if tm.Replicas == 0 {
		return fmt.Sprint(tm.Primaries)
	}
	return fmt.Sprintf("%d + %d", tm.Primaries, tm.Replicas)
}

// HeadroomText is the summary's headroom column.
func (s ScenarioSummary) HeadroomText() string {
	if s.Binding == "" {
		return "-"
	}
	if s.Headroom > 9.99 {
		return "> 999%"
	}
	return fmt.Sprintf("%.0f%%", 100*s.Headroom)
}

// RunMachine describes what measured: the machine the harness ran on, and
// where its servers were.
type RunMachine struct {
	Cores      int    `json:"cores"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPU        string `json:"cpu"`
	OS         string `json:"os"`
	Go         string `json:"go"`
	Redis      string `json:"redis"`
	SQL        string `json:"sql"`
	// Shared is true when a server ran on this machine, competing with the
	// load generator for its cores: the closed-loop rates are then lower
	// than a separate server gives, which is why loads are sized by server
	// CPU where it can be read.
	Shared bool `json:"load_generator_shares_servers"`
}

// machine describes this run's machine and servers.
func (e *Env) machine(ctx context.Context) RunMachine {
	m := RunMachine{Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), CPU: cpuModel(),
		OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()}
	if host, err := os.Hostname(); err == nil {
		m.OS += " (" + host + ")"
	}
	switch r := e.redis; {
	case r == nil:
		m.Redis = "not opened"
	case r.Kind == devcore.Miniredis:
		m.Redis, m.Shared = "miniredis, in this process", true
	default:
		v, _ := e.redisVersion(ctx)
		where := "spawned on this machine"
		if r.Kind == devcore.External {
			where = "at " + strings.Join(r.Addrs, ",")
			local := true
			for _, a := range r.Addrs {
				local = local && isLoopback(a)
			}
			if local {
				where += ", on this machine"
			}
			m.Shared = m.Shared || local
		} else {
			m.Shared = true
		}
		m.Redis = strings.TrimSpace("Redis "+v) + ", " + where
	}
	switch {
	case e.MySQLDSN == "" && e.sql != nil:
		m.SQL, m.Shared = "SQLite, in this process", true
	case e.MySQLDSN == "":
		m.SQL = "none"
	default:
		v, _ := e.sqlVersion(ctx)
		where := "?"
		if cfg, err := mysql.ParseDSN(e.MySQLDSN); err == nil {
			where = cfg.Addr
			if cfg.Net == "unix" || isLoopback(cfg.Addr) {
				where += ", on this machine"
				m.Shared = true
			}
		}
		m.SQL = sqlProduct(v) + " at " + where
	}
	return m
}

// Text is the machine in one paragraph.
func (m RunMachine) Text() string {
	shared := "servers on other machines"
	if m.Shared {
		shared = "the load generator shared this machine with the servers"
	}
	return fmt.Sprintf("%d cores (GOMAXPROCS %d), %s, %s, %s; %s; SQL: %s; %s.",
		m.Cores, m.GOMAXPROCS, m.CPU, m.OS, m.Go, m.Redis, m.SQL, shared)
}
