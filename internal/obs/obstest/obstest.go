// Package obstest reads the SDK's metrics for tests.
package obstest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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

// Expect fails t unless got holds exactly want's points with want's values
// (metric points, or any other map a test compares with its model).
func Expect[K, V comparable](t testing.TB, got, want map[K]V) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%+v = %v, want %v", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%+v = %v, want no such point", k, v)
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

// ExpectSpanOutcomes fails t unless spans holds exactly want, keyed
// "<span name> <outcome attribute>", and none recorded an error event
// (for scripts in which no operation fails).
func ExpectSpanOutcomes(t testing.TB, spans *tracetest.InMemoryExporter, want map[string]int) {
	t.Helper()
	got := map[string]int{}
	for _, sp := range spans.GetSpans() {
		attrs := attribute.NewSet(sp.Attributes...)
		outcome, _ := attrs.Value("casebook.outcome")
		got[sp.Name+" "+outcome.AsString()]++
		if len(sp.Events) != 0 {
			t.Errorf("span %s (%s) recorded %d events", sp.Name, outcome.AsString(), len(sp.Events))
		}
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("spans %s: %d, want %d", k, got[k], n)
		}
	}
	for k, n := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("spans %s: %d, want none", k, n)
		}
	}
}

// NewSDK returns the SDK's providers for a test: metrics read on demand by
// reader, spans exported synchronously into spans.
func NewSDK() (reader *sdkmetric.ManualReader, mp *sdkmetric.MeterProvider, spans *tracetest.InMemoryExporter, tp *sdktrace.TracerProvider) {
	reader = sdkmetric.NewManualReader()
	spans = tracetest.NewInMemoryExporter()
	return reader, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), spans, sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
}

// AddOp adds n to want's two points of one operation of block — its
// counter and its duration histogram, named as Points names them; reason
// is "" but for a refusal.
func AddOp(want map[string]float64, block, op, outcome, reason string, n float64) {
	attrs := "casebook.operation=" + op + ",casebook.outcome=" + outcome
	if reason != "" {
		attrs += ",casebook.reason=" + reason
	}
	want["casebook."+block+".operations "+attrs] += n
	want["casebook."+block+".operation.duration "+attrs] += n
}
