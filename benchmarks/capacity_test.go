package main

import (
	"math"
	"testing"
)

// Hand-computed values for every scenario's figures, from the inputs alone.
func TestScenarioArithmetic(t *testing.T) {
	want := map[string]map[string]float64{
		"short link": {
			"avg reads":        1e8 / 86400,         // 1157.4
			"peak reads":       3 * 1e8 / 86400,     // 3472.2
			"avg writes":       1e6 / 86400,         // 11.57
			"peak writes":      5 * 1e6 / 86400,     // 57.87
			"storage per year": 1e6 * 300 * 365,     // 109.5 GB
			"storage, 5 years": 5 * 1e6 * 300 * 365, // 547.5 GB
		},
		"leaderboard": {
			"peak score writes": 3 * 50e6 / 14400, // 10416.7
			"peak board reads":  3 * 50e6 / 14400,
			"sorted-set memory": 50e6 * 70, // 3.5 GB
		},
		"hot list": {
			"peak events":     3 * 2e9 / 14400, // 416,667 — the seed says 4.17e6
			"peak list reads": 3 * 2e8 / 14400, // 41,667 — the seed says 417k
			"item memory":     5e6 * 70,        // 350 MB
		},
		"sign-in": {
			"avg sign-ins":            1e6 / 7200,     // 138.9
			"peak sign-ins":           5 * 1e6 / 7200, // 694.4
			"peak reads":              50 * 1e6 / 7200,
			"record storage per year": 1e6 * 50 * 365, // 18.25 GB
			"bitmaps per year":        1e6 * 46,
		},
		"order & pay": {
			"avg orders":          250e3 * 0.8 / 14400, // 13.9
			"peak orders":         5 * 200e3 / 14400,   // 69.4
			"peak DB writes":      50 * 200e3 / 14400,  // 694
			"sale peak orders":    5 * 5e6 / 3600,      // 6944
			"sale peak DB writes": 50 * 5e6 / 3600,     // 69,444
			"storage per year":    250e3 * 1000 * 365,  // 91.25 GB
		},
		"flash sale": {"gateway": 1e6, "to the service": 1e5, "winners": 5000},
		"red packet": {
			"grab rows per day":   37.77e9,
			"rows per day":        12 * 3.777e9,       // 45.3e9
			"storage per day":     12 * 3.777e9 * 100, // 4.53 TB — the seed says 40 TB
			"avg grabs":           37.77e9 / 86400,    // 437k
			"peak grabs (stated)": 760e3,
		},
		"feed": {
			"peak posts":            3 * 250e6 / 86400, // 8680.6
			"peak timeline reads":   3 * 5e9 / 86400,   // 173,611
			"post storage per year": 250e6 * 1000 * 365,
			"images per day":        250e6 * 3 * 500e3, // 375 TB — the seed says 3.75 PB
		},
		"e-commerce": {
			"peak orders":                       6 * 500e3 / 86400, // 34.7 — the seed says 350
			"SKU cache":                         5e6 * 200,
			"sale requests stopped at the gate": 20e3 * 0.99, // 19,800
			"sale purchases decided":            20e3 * 0.01, // 200
			"sale orders written":               2e3,
		},
	}
	for _, s := range Scenarios() {
		w, ok := want[s.Name]
		if !ok {
			t.Errorf("scenario %q has no hand-computed values", s.Name)
			continue
		}
		if len(w) != len(s.Figures) {
			t.Errorf("%s: %d figures, %d hand-computed", s.Name, len(s.Figures), len(w))
		}
		for _, f := range s.Figures {
			hw, ok := w[f.Name]
			if !ok {
				t.Errorf("%s: figure %q not hand-computed", s.Name, f.Name)
				continue
			}
			if math.Abs(f.Value-hw) > 1e-9*math.Max(1, hw) {
				t.Errorf("%s / %s = %g, want %g", s.Name, f.Name, f.Value, hw)
			}
		}
	}
}

// The seed figures this harness cannot reproduce from the seeds' own inputs
// are exactly these; every other one agrees within the tolerance.
func TestSeedDisagreements(t *testing.T) {
	want := map[string]bool{
		"hot list/peak events":       true,
		"hot list/peak list reads":   true,
		"red packet/storage per day": true,
		"feed/images per day":        true,
		"e-commerce/peak orders":     true,
	}
	for _, s := range Scenarios() {
		for _, f := range s.Figures {
			id := s.Name + "/" + f.Name
			if f.Agrees() == want[id] {
				t.Errorf("%s: computed %g, seed %g: agrees=%v", id, f.Value, f.Seed, f.Agrees())
			}
			if want[id] && math.Abs(f.Ratio()-10) > 1.5 {
				t.Errorf("%s: seed/computed = %.2f, expected the seeds' ×10 slip", id, f.Ratio())
			}
		}
	}
}

func TestFigureAgreement(t *testing.T) {
	cases := []struct {
		f    Figure
		want bool
	}{
		{Figure{Value: 3472, Seed: 3500}, true},
		{Figure{Value: 3300, Seed: 3500}, false},
		{Figure{Value: 45e9, Seed: 40e9, AtLeast: true}, true},
		{Figure{Value: 30e9, Seed: 40e9, AtLeast: true}, false},
		{Figure{Value: 7}, true},
	}
	for _, c := range cases {
		if got := c.f.Agrees(); got != c.want {
			t.Errorf("%+v.Agrees() = %v, want %v", c.f, got, c.want)
		}
	}
}

func TestSizeFor(t *testing.T) {
	cases := []struct {
		peak, perNode, u float64
		replicas         int
		want             Size
		ok               bool
	}{
		{3472, 100000, 0.6, 1, Size{Exact: 3472.0 / 60000, Primaries: 1, Replicas: 1, Machines: 2}, true},
		{6944, 1320, 0.6, 1, Size{Exact: 6944 / 792.0, Primaries: 9, Replicas: 9, Machines: 18}, true},
		{200000, 100000, 1, 2, Size{Exact: 2, Primaries: 2, Replicas: 4, Machines: 6}, true},
		{120000, 100000, 0.6, 0, Size{Exact: 2, Primaries: 2, Machines: 2}, true},
		{10, 0, 0.6, 1, Size{}, false},
	}
	for _, c := range cases {
		got, ok := SizeFor(c.peak, c.perNode, c.u, c.replicas)
		if ok != c.ok || math.Abs(got.Exact-c.want.Exact) > 1e-9 || got.Primaries != c.want.Primaries ||
			got.Replicas != c.want.Replicas || got.Machines != c.want.Machines {
			t.Errorf("SizeFor(%g, %g, %g, %d) = %+v, %v; want %+v, %v", c.peak, c.perNode, c.u, c.replicas, got, ok, c.want, c.ok)
		}
	}
}

// Every load a scenario computes (a figure per second) is either answered
// by a sizing, which names it, or says why it has none; and every sizing
// names a figure of its own scenario.
func TestEveryLoadSizedOrExplained(t *testing.T) {
	plan := makePlan(Scenarios(), nil, 0.6, nil)
	for _, s := range plan.Scenarios {
		names := map[string]bool{}
		for _, f := range s.Figures {
			names[f.Name] = true
			if f.Unit == "/s" && len(f.SizedBy) == 0 && f.NotSized == "" {
				t.Errorf("%s: the load %q (%.0f/s) has no sizing and no reason", s.Name, f.Name, f.Value)
			}
			if len(f.SizedBy) > 0 && f.NotSized != "" {
				t.Errorf("%s: %q is sized by %v and says it is not: %s", s.Name, f.Name, f.SizedBy, f.NotSized)
			}
		}
		for _, z := range s.Sizings {
			if !names[z.Answers] {
				t.Errorf("%s: sizing %q answers %q, which is not one of its figures", s.Name, z.What, z.Answers)
			}
		}
	}
}

// A scenario's loads on one tier share its machines: 0.6 and 0.7 of a
// Redis primary are 2 primaries (not 1 + 1), with their replicas; the
// binding tier is the fullest per primary.
func TestSummaryTotalsByTier(t *testing.T) {
	sized := func(what string, tier Tier, exact float64) PlanSizing {
		size, _ := SizeFor(exact, 1, 1, 1)
		if tier == TierApp {
			size, _ = SizeFor(exact, 1, 1, 0)
		}
		return PlanSizing{Sizing: Sizing{What: what, Measurement: "m." + what}, Tier: tier, Size: &size}
	}
	got := summariseScenarios([]PlanScenario{{Name: "s", Replication: Replication{Redis: 1, MySQL: 1}, Sizings: []PlanSizing{
		sized("a", TierRedis, 0.6), sized("b", TierRedis, 0.7), sized("c", TierApp, 0.2), sized("d", TierMySQL, 2.9),
		{Sizing: Sizing{What: "e", Measurement: "m.e"}, Note: "not sized: nothing measured"},
	}}})
	if len(got) != 1 {
		t.Fatalf("%+v", got)
	}
	s := got[0]
	if s.TierText(TierRedis) != "2 + 2" || s.TierText(TierMySQL) != "3 + 3" || s.TierText(TierApp) != "1" || s.Machines != 11 || s.Unsized != 1 {
		t.Errorf("tiers %q %q %q, machines %d, unsized %d; want 2 + 2, 3 + 3, 1, 11, 1", s.TierText(TierRedis), s.TierText(TierMySQL), s.TierText(TierApp), s.Machines, s.Unsized)
	}
	// MySQL is 2.9 of 3 primaries, fuller than Redis' 1.3 of 2.
	if s.Binding != "d (m.d)" || s.HeadroomText() != "3%" {
		t.Errorf("binding %q, headroom %s; want d (m.d), 3%%", s.Binding, s.HeadroomText())
	}
}
