// Package obstest reads the SDK's metrics for tests.
package obstest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Points collects reader's metrics for tests: every data point of every
// int64 or float64 counter, gauge and histogram (its count), keyed by
// "<instrument> <attribute=value,…>" in attribute order.
func Points(t testing.TB, reader *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	name := func(m metricdata.Metrics, attrs attribute.Set) string {
		s := m.Name
		for i, kv := range attrs.ToSlice() {
			if i == 0 {
				s += " "
			} else {
				s += ","
			}
			s += string(kv.Key) + "=" + kv.Value.String()
		}
		return s
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[name(m, p.Attributes)] += float64(p.Value)
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					out[name(m, p.Attributes)] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[name(m, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[name(m, p.Attributes)] = p.Value
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					out[name(m, p.Attributes)] += float64(p.Count)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[name(m, p.Attributes)] += float64(p.Count)
				}
			}
		}
	}
	return out
}

// Expect fails t unless got holds exactly want's points with want's values.
func Expect(t testing.TB, got, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s = %v, want no such point", k, v)
		}
	}
}

// ExpectSpans fails t unless spans holds exactly want's span names, each
// as many times as want says.
func ExpectSpans(t testing.TB, spans *tracetest.InMemoryExporter, want map[string]int) {
	t.Helper()
	names := map[string]int{}
	for _, s := range spans.GetSpans() {
		names[s.Name]++
	}
	for name, n := range want {
		if names[name] != n {
			t.Errorf("%d spans %q, want %d", names[name], name, n)
		}
	}
	for name, n := range names {
		if _, ok := want[name]; !ok {
			t.Errorf("%d spans %q, want none", n, name)
		}
	}
}
