package obs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/internal/obs/obstest"
)

var errFull = errors.New("full")

func classify(err error) (string, string) {
	if errors.Is(err, errFull) {
		return obs.Refused, "full"
	}
	return obs.Error, ""
}

// With no provider given and none installed globally an operation is
// free: nothing measured, no span, no allocation. Then a provider
// installed globally, after the block was made, receives its data within
// PollEvery, and a block made after that at once (the order a service's
// main usually takes). One test: the global providers are process-wide.
func TestGlobalProviders(t *testing.T) {
	ctx := context.Background()
	b := obs.NewBlock("test", nil, nil)
	op := b.Op("put", classify, "full")
	if b.Metering() || b.Tracing() {
		t.Fatal("metering or tracing with no provider installed")
	}
	allocs := testing.AllocsPerRun(1000, func() {
		c, call := op.Start(ctx)
		_ = c
		call.End(errFull)
	})
	if allocs != 0 {
		t.Errorf("an operation with no provider installed allocates %v times", allocs)
	}

	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewInMemoryExporter()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
	// The block sees them within PollEvery (a few, on a loaded machine).
	waited := time.Duration(0)
	for ; !b.Metering() || !b.Tracing(); waited += time.Millisecond {
		if waited > 20*obs.PollEvery {
			t.Fatalf("providers installed %v ago not seen (metering %v, tracing %v)", waited, b.Metering(), b.Tracing())
		}
		time.Sleep(time.Millisecond)
	}
	// A block made now sees them at once.
	if later := obs.NewBlock("later", nil, nil); !later.Metering() || !later.Tracing() {
		t.Fatal("a block made after the providers were installed does not see them")
	}
	for _, err := range []error{nil, nil, errFull, errors.New("boom"), context.Canceled, errors.Join(errFull, context.DeadlineExceeded)} {
		_, call := op.Start(ctx)
		if got := call.End(err); got != err {
			t.Fatalf("End returned %v for %v", got, err)
		}
	}
	got := obstest.Points(t, reader)
	want := map[string]float64{
		"casebook.test.operations casebook.operation=put,casebook.outcome=ok":                                   2,
		"casebook.test.operations casebook.operation=put,casebook.outcome=refused,casebook.reason=full":         1,
		"casebook.test.operations casebook.operation=put,casebook.outcome=error":                                1,
		"casebook.test.operations casebook.operation=put,casebook.outcome=canceled":                             2,
		"casebook.test.operation.duration casebook.operation=put,casebook.outcome=ok":                           2,
		"casebook.test.operation.duration casebook.operation=put,casebook.outcome=refused,casebook.reason=full": 1,
		"casebook.test.operation.duration casebook.operation=put,casebook.outcome=error":                        1,
		"casebook.test.operation.duration casebook.operation=put,casebook.outcome=canceled":                     2,
	}
	obstest.Expect(t, got, want)
	recorded := 0
	for _, s := range spans.GetSpans() {
		if s.Name != "test.put" {
			t.Errorf("span %q", s.Name)
		}
		recorded += len(s.Events)
	}
	if n := len(spans.GetSpans()); n != 6 || recorded != 1 {
		t.Errorf("%d spans, %d errors recorded; want 6 and 1 (only the outcome error records one)", n, recorded)
	}
}
