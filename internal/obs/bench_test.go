package obs_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// BenchmarkOpUninstalled: Start and End of an operation while no provider
// is installed — what every instrumented call pays in a service that set
// OpenTelemetry up nowhere. (Run it alone: TestGlobalProviders installs
// providers, for good, in the same binary.)
func BenchmarkOpUninstalled(b *testing.B) {
	ctx := context.Background()
	op := obs.NewBlock("bench", nil, nil).Op("op", nil)
	b.ReportAllocs()
	for b.Loop() {
		_, call := op.Start(ctx)
		call.End(nil)
	}
}

// BenchmarkSDKFloor: what any instrumentation of one operation with the
// OpenTelemetry SDK pays at least — a clock read before and after, one
// histogram Record and one counter Add with a precomputed attribute set,
// into a ManualReader (impl=sdk-floor) — beside casebook's Start and End
// on the same SDK (impl=casebook), in one run. The floor is what makes a
// 10% budget impossible for an operation of a few hundred nanoseconds.
func BenchmarkSDKFloor(b *testing.B) {
	ctx := context.Background()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	m := mp.Meter("floor")
	hist, _ := m.Float64Histogram("d", metric.WithUnit("s"))
	count, _ := m.Int64Counter("c")
	set := attribute.NewSet(attribute.String("casebook.operation", "op"), attribute.String("casebook.outcome", "ok"))
	rec, add := []metric.RecordOption{metric.WithAttributeSet(set)}, []metric.AddOption{metric.WithAttributeSet(set)}
	b.Run("impl=sdk-floor", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			start := testenv.Now() // time.Now shifted: the same clock read
			hist.Record(ctx, testenv.Since(start).Seconds(), rec...)
			count.Add(ctx, 1, add...)
		}
	})
	op := obs.NewBlock("bench", mp, nil).Op("op", nil) // metrics only
	b.Run("impl=casebook", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, call := op.Start(ctx)
			call.End(nil)
		}
	})
}
