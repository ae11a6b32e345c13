package outbox_test

import (
	"context"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
)

// A relay's metrics through a scripted run: 3 + 2 entries waiting, a
// publisher down for one batch, then everything relayed — pending, age,
// relayed by outcome, drains by outcome and their spans, exact.
func TestRelayMetrics(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	space := keys.NewSpace(r.Namespace)
	streams := []string{space.Key("a", "outbox"), space.Key("b", "outbox")}
	for i, n := range []int{3, 2} {
		for range n {
			if err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: streams[i], Values: []any{outbox.FieldKey, "k", outbox.FieldValue, "v"}}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewInMemoryExporter()
	var got int
	pub := &flaky{down: 1, p: outbox.Direct(func(context.Context, []byte, []byte) error { got++; return nil })}
	relay := outbox.NewRelay(r.Client, streams, "t", pub,
		outbox.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		outbox.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))))

	before := obstest.Points(t, reader)
	for i, n := range []float64{3, 2} {
		key := "casebook.outbox.pending casebook.outbox.stream=" + streams[i]
		age := "casebook.outbox.oldest_age casebook.outbox.stream=" + streams[i]
		if before[key] != n {
			t.Errorf("%s = %v, want %v", key, before[key], n)
		}
		if a, ok := before[age]; !ok || a < 0 || a > 60 {
			t.Errorf("%s = %v (reported %v), want a few seconds at most", age, a, ok)
		}
	}
	if _, err := relay.Drain(ctx); err == nil {
		t.Fatal("a drain through a publisher that is down succeeded")
	}
	if n, err := relay.DrainAll(ctx); err != nil || n != 5 || got != 5 {
		t.Fatalf("drained %d (%v), handler got %d; want 5", n, err, got)
	}
	after := obstest.Points(t, reader)
	want := map[string]float64{
		"casebook.outbox.relayed casebook.outcome=error":                                     3, // the first stream's batch, refused
		"casebook.outbox.relayed casebook.outcome=ok":                                        5,
		"casebook.outbox.operations casebook.operation=drain,casebook.outcome=error":         1,
		"casebook.outbox.operations casebook.operation=drain,casebook.outcome=ok":            2, // DrainAll: one pass relays all, one finds none
		"casebook.outbox.operation.duration casebook.operation=drain,casebook.outcome=error": 1,
		"casebook.outbox.operation.duration casebook.operation=drain,casebook.outcome=ok":    2,
	}
	for i := range streams {
		want["casebook.outbox.pending casebook.outbox.stream="+streams[i]] = 0
		want["casebook.outbox.oldest_age casebook.outbox.stream="+streams[i]] = 0
	}
	obstest.Expect(t, after, want)
	// Closed, the relay's gauges are no longer collected (twice is fine).
	if err := relay.Close(); err != nil || relay.Close() != nil {
		t.Fatalf("close: %v", err)
	}
	for k := range obstest.Points(t, reader) {
		if strings.HasPrefix(k, "casebook.outbox.pending") || strings.HasPrefix(k, "casebook.outbox.oldest_age") {
			t.Errorf("%s still collected after Close", k)
		}
	}
	var errSpans int
	for _, s := range spans.GetSpans() {
		if s.Name != "outbox.drain" {
			t.Errorf("span %q", s.Name)
		}
		if len(s.Events) > 0 {
			errSpans++
		}
	}
	if n := len(spans.GetSpans()); n != 3 || errSpans != 1 {
		t.Errorf("%d drain spans, %d with an error recorded; want 3 and 1", n, errSpans)
	}
}
