package main

import (
	"math"
	"time"
)

// Load is a daily volume of one kind of request and how it bunches up.
type Load struct {
	PerDay     float64       // requests per day
	Window     time.Duration // the busy period they fall in (24h when spread over the day)
	Share      float64       // share of PerDay that falls in Window (1 when all of it)
	PeakFactor float64       // peak second over the window's average
}

// Avg is the average rate over the busy window, per second.
func (l Load) Avg() float64 { return l.PerDay * l.Share / l.Window.Seconds() }

// Peak is the rate at the peak, per second.
func (l Load) Peak() float64 { return l.Avg() * l.PeakFactor }

// Figure is one computed number beside the number the seed states for it.
type Figure struct {
	Name  string  `json:"name"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
	// Seed is the seed's own figure; 0 when the seed gives none.
	Seed float64 `json:"seed,omitempty"`
	// AtLeast marks a seed figure stated as a lower bound ("> 400亿 rows").
	AtLeast bool `json:"at_least,omitempty"`
	// NotSized says why a load (Unit "/s") has no sizing of its own; an
	// average's is implied (its load is sized at the peak), and a figure a
	// sizing answers (Sizing.Answers) needs none.
	NotSized string `json:"not_sized,omitempty"`
}

// tolerance is how far a computed figure may sit from the seed's rounded one
// ("≈3500" for 3472) and still agree.
const tolerance = 0.05

// Agrees reports whether the computed value reproduces the seed's figure.
// A figure without a seed figure agrees trivially.
func (f Figure) Agrees() bool {
	if f.Seed == 0 {
		return true
	}
	if f.AtLeast {
		return f.Value >= f.Seed*(1-tolerance)
	}
	return math.Abs(f.Value-f.Seed) <= tolerance*f.Seed
}

// Ratio is the seed figure over the computed one (10 means the seed says ten
// times more than its own inputs give).
func (f Figure) Ratio() float64 {
	if f.Value == 0 {
		return math.Inf(1)
	}
	return f.Seed / f.Value
}

// Sizing says which measured operation serves a load at its peak.
type Sizing struct {
	What        string  `json:"what"`        // "peak resolves/s"
	Peak        float64 `json:"peak"`        // per second
	Measurement string  `json:"measurement"` // a measurement name, see measurements.go
	// Answers names the scenario's figure (Figure.Name) this load is, the
	// seed's figure when the seed gives one.
	Answers string `json:"answers"`
}

// Replication is how many replicas each primary of a backend has.
type Replication struct {
	Redis int `json:"redis"`
	MySQL int `json:"mysql"`
}

// defaultReplication is one replica per primary, for a scenario that states
// none (the seeds do not).
var defaultReplication = Replication{Redis: 1, MySQL: 1}

// of is the replicas per primary of tier; stateless app nodes have none.
func (r Replication) of(t Tier) int {
	switch t {
	case TierRedis:
		return r.Redis
	case TierMySQL:
		return r.MySQL
	}
	return 0
}

// Storage is data a scenario keeps on a backend: a resident set of Records,
// or PerDay records kept RetentionDays.
type Storage struct {
	What           string  `json:"what"`
	Records        float64 `json:"records,omitempty"`
	PerDay         float64 `json:"per_day,omitempty"`
	RetentionDays  float64 `json:"retention_days,omitempty"`
	BytesPerRecord float64 `json:"bytes_per_record"`
	On             Tier    `json:"on"` // TierRedis (memory) or TierMySQL (disk)
	// MeasuredBy names the measurement whose footprint gives the bytes per
	// record instead of BytesPerRecord (the stated figure), when it ran.
	MeasuredBy string `json:"measured_by,omitempty"`
}

// Bytes is the data's size on one copy.
func (s Storage) Bytes() float64 { return s.records() * s.BytesPerRecord }

func (s Storage) records() float64 {
	if s.Records > 0 {
		return s.Records
	}
	return s.PerDay * s.RetentionDays
}

// Size is the answer for one load: Primaries = ceil(Exact), where Exact is
// peak ÷ (per-node throughput × utilisation), each primary with Replicas.
type Size struct {
	Exact     float64 `json:"exact"`
	Primaries int     `json:"primaries"`
	Replicas  int     `json:"replicas"` // in all, not per primary
	Machines  int     `json:"machines"` // primaries + replicas
}

// SizeFor sizes a peak load for nodes measured at perNode operations per
// second, run at utilisation (0 < u ≤ 1) of that, each primary with
// replicas. ok is false when nothing was measured.
func SizeFor(peak, perNode, utilisation float64, replicas int) (s Size, ok bool) {
	if perNode <= 0 || utilisation <= 0 {
		return Size{}, false
	}
	s.Exact = peak / (perNode * utilisation)
	s.Primaries = max(1, int(math.Ceil(s.Exact-1e-9))) // 2.0000000001 is 2
	s.Replicas = s.Primaries * replicas
	s.Machines = s.Primaries + s.Replicas
	return s, true
}

// Decimal units, as the seeds use them.
const (
	KB = 1e3
	MB = 1e6
	GB = 1e9
	TB = 1e12
	PB = 1e15
)

const (
	day  = 24 * time.Hour
	year = 365
)
