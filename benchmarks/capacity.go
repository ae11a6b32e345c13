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
}

// Machines is how many machines of the measured throughput the peak needs
// (at least 1). ok is false when nothing was measured.
func Machines(peak, measured float64) (n int, ok bool) {
	if measured <= 0 {
		return 0, false
	}
	return max(1, int(math.Ceil(peak/measured))), true
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
