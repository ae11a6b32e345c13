package main

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are timed per Op (one call, however many units its Batch
// counts) into one HDR histogram per worker, merged when the workers stop:
// nothing is shared on the hot path.
//
// Reading the clock is not free — on some VMs a time.Now costs over 100 ns,
// more than a whole in-process op — so an op much cheaper than the clock is
// sampled: after each timed op a worker runs the next stride-1 ops untimed,
// stride chosen so that the clock costs about 1% of the work
// (sampleBudget ÷ the op's latency, capped at maxStride), and the timed op's
// value is recorded stride times to stand for them all. Ops slower than the
// budget are all timed. Each value is net of the clock's own cost, measured
// once per process (clockCost); max is the largest timed op's.
const (
	latencyDigits = 2 // significant digits: values are kept within 1%
	maxLatency    = int64(time.Minute)
	maxStride     = 4096
)

// clockCost is the median duration of an empty timed interval here.
var clockCost = sync.OnceValue(func() time.Duration {
	d := make([]time.Duration, 1001)
	for i := range d {
		start := time.Now()
		d[i] = time.Since(start)
	}
	slices.Sort(d)
	return d[len(d)/2]
})

// sampleBudget is how long the ops between two clock readings should take
// for the readings (and the histogram update) to cost about 1% of it.
func sampleBudget() time.Duration { return 100 * (clockCost() + 15*time.Nanosecond) }

// opTimer runs one worker's ops, timing a sample of them.
type opTimer struct {
	hist   *hdrhistogram.Histogram
	budget time.Duration
	clock  time.Duration
	stride int64 // the count the next timed op stands for
	left   int64 // untimed ops to run before the next timed one
}

func newOpTimer() *opTimer {
	return &opTimer{hist: newLatencyHistogram(), budget: sampleBudget(), clock: clockCost(), stride: 1}
}

func newLatencyHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, maxLatency, latencyDigits)
}

// untimed reports whether the next op runs untimed (and counts it). A
// worker runs each op as
//
//	if t.untimed() { err = op() } else { err = t.timed(op) }
//
// which the compiler inlines: an untimed op costs a decrement and a compare,
// where a method wrapping both calls would cost a call more.
func (t *opTimer) untimed() bool {
	t.left--
	return t.left >= 0
}

// timed runs op under the clock. An op that fails is not recorded.
func (t *opTimer) timed(op func() error) error {
	start := time.Now()
	err := op()
	d := time.Since(start)
	if err != nil {
		return err
	}
	// This op stands for itself and the stride-1 untimed ones after it; the
	// stride was chosen before it ran, so its latency does not decide how
	// much it counts. It sets the stride of the next one.
	net := min(max(d-t.clock, 1), time.Duration(maxLatency))
	t.hist.RecordValues(int64(net), t.stride)
	t.left = t.stride - 1
	t.stride = min(maxStride, max(1, int64(t.budget/net)))
	return nil
}

// Latency is a measurement's per-op latency summary in microseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

func summarise(h *hdrhistogram.Histogram) *Latency {
	if h == nil || h.TotalCount() == 0 {
		return nil
	}
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	return &Latency{P50: us(h.ValueAtQuantile(50)), P99: us(h.ValueAtQuantile(99)),
		P999: us(h.ValueAtQuantile(99.9)), Max: us(h.Max())}
}

// LatencyPoint is one point of a percentile distribution: Percentile of the
// ops took at most Micros.
type LatencyPoint struct {
	Percentile float64
	Micros     float64
}

// distribution samples h's percentile curve evenly in "nines" (90%, 99%,
// 99.9%, …) up to the last op recorded, for the HTML chart.
func distribution(h *hdrhistogram.Histogram) []LatencyPoint {
	if h == nil || h.TotalCount() == 0 {
		return nil
	}
	top := math.Log10(float64(h.TotalCount()))
	var pts []LatencyPoint
	for nines := 0.0; nines < top; nines += 0.1 {
		p := 100 * (1 - math.Pow(10, -nines))
		pts = append(pts, LatencyPoint{p, float64(h.ValueAtQuantile(p)) / 1e3})
	}
	return append(pts, LatencyPoint{100, float64(h.Max()) / 1e3})
}
