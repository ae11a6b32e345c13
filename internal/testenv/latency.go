package testenv

import (
	"slices"
	"testing"
	"time"
)

// Latencies runs op b.N times (the benchmark's loop) and reports the
// median and p99 in milliseconds beside ns/op; an error fails the benchmark.
func Latencies(b *testing.B, op func() error) {
	b.ReportAllocs()
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(ds[len(ds)*99/100])/1e6, "p99-ms")
}
