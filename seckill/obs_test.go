package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/seckill"
)

// A scripted sale read through the OpenTelemetry SDK: 12 buyers of 7 units
// (one of them twice, one with a bad name) through Buy and the Batcher, a
// poison order message, a Reconcile — every counter, the stock gauge, the
// drift and the spans exact.
func TestMetricsAndSpans(t *testing.T) {
	ctx := context.Background()
	reader, mp, spans, tp := obstest.NewSDK()
	f := setup(t, testenv.NewRedis(t), 7, 1, 2, seckill.Config{MeterProvider: mp, TracerProvider: tp, SoldOutFor: -1})

	want := map[string]int64{} // "operation/outcome/reason" → count
	buy := func(op string, buy func(string) (string, error), user string, wantErr error) {
		t.Helper()
		_, err := buy(user)
		if !errors.Is(err, wantErr) {
			t.Fatalf("%s(%s): %v, want %v", op, user, err, wantErr)
		}
		key := op + "/ok/"
		switch wantErr {
		case seckill.ErrSoldOut:
			key = op + "/refused/sold_out"
		case seckill.ErrLimitReached:
			key = op + "/refused/limit_reached"
		case seckill.ErrInvalid:
			key = op + "/refused/invalid"
		}
		want[key]++
	}
	direct := func(u string) (string, error) { return f.sl.Buy(ctx, u, 1) }
	bt := f.sl.NewBatcher(seckill.BatchConfig{})
	defer bt.Close()
	batched := func(u string) (string, error) { return bt.Buy(ctx, u, 1) }
	for i := range 4 {
		buy("buy", direct, fmt.Sprintf("d%d", i), nil)
	}
	buy("buy", direct, "d0", seckill.ErrLimitReached)
	buy("buy", direct, "no spaces allowed", seckill.ErrInvalid)
	for i := range 3 {
		buy("buy_batched", batched, fmt.Sprintf("b%d", i), nil)
	}
	for i := range 3 {
		buy("buy_batched", batched, fmt.Sprintf("late%d", i), seckill.ErrSoldOut)
	}
	buy("buy", direct, "later", seckill.ErrSoldOut)
	if err := f.s.HandleOrder(ctx, nil, []byte(`{"v":1}`)); !errors.Is(err, outbox.ErrPoison) {
		t.Fatalf("a malformed order message: %v, want poison", err)
	}
	want["handle_order/refused/poison"]++
	rep, err := f.sl.Reconcile(ctx, false)
	if err != nil || !rep.OK() {
		t.Fatalf("reconcile: %+v, %v", rep, err)
	}
	want["reconcile/ok/"]++

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got, durations := map[string]int64{}, map[string]uint64{}
	var stock, drift []metricdata.DataPoint[int64]
	var batchBuyers int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name != "casebook.seckill.operations" || m.Unit != "{operation}" || !d.IsMonotonic {
					t.Errorf("counter %s (%s, monotonic %v)", m.Name, m.Unit, d.IsMonotonic)
				}
				for _, p := range d.DataPoints {
					got[key(p.Attributes)] += p.Value
				}
			case metricdata.Histogram[float64]:
				if m.Name != "casebook.seckill.operation.duration" || m.Unit != "s" {
					t.Errorf("histogram %s (%s)", m.Name, m.Unit)
				}
				for _, p := range d.DataPoints {
					durations[key(p.Attributes)] += p.Count
					if p.Sum <= 0 {
						t.Errorf("%s: durations sum to %v", key(p.Attributes), p.Sum)
					}
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					batchBuyers += p.Sum
				}
			case metricdata.Gauge[int64]:
				switch m.Name {
				case "casebook.seckill.stock":
					stock = d.DataPoints
				case "casebook.seckill.reconcile.drift":
					drift = d.DataPoints
				}
			}
		}
	}
	for k, n := range want {
		if got[k] != n || durations[k] != uint64(n) {
			t.Errorf("%s: counted %d, timed %d, want %d", k, got[k], durations[k], n)
		}
	}
	for k, n := range got {
		if want[k] == 0 {
			t.Errorf("%s: counted %d, want none", k, n)
		}
	}
	// The Batcher's buyers that reached Redis: 3 bought, 3 found it sold out.
	if batchBuyers != 6 {
		t.Errorf("batch sizes sum to %d buyers, want 6", batchBuyers)
	}
	campaign := attribute.NewSet(attribute.String("casebook.seckill.campaign", "c1"))
	if len(stock) != 1 || stock[0].Value != 0 || !stock[0].Attributes.Equals(&campaign) {
		t.Errorf("stock gauge: %+v, want 0 for c1", stock)
	}
	if len(drift) != 1 || drift[0].Value != 0 || !drift[0].Attributes.Equals(&campaign) {
		t.Errorf("drift gauge: %+v, want 0 for c1", drift)
	}

	// One span per operation, named <block>.<operation>, its outcome an
	// attribute; errors recorded only for outcome "error".
	spanCount := map[string]int64{}
	for _, s := range spans.GetSpans() {
		attrs := attribute.NewSet(s.Attributes...)
		outcome, _ := attrs.Value("casebook.outcome")
		spanCount[s.Name+"/"+outcome.AsString()]++
		if len(s.Events) != 0 {
			t.Errorf("span %s (%s) recorded %d events", s.Name, outcome.AsString(), len(s.Events))
		}
	}
	wantSpans := map[string]int64{}
	for k, n := range want {
		parts := strings.Split(k, "/")
		wantSpans["seckill."+parts[0]+"/"+parts[1]] += n
	}
	for k, n := range wantSpans {
		if spanCount[k] != n {
			t.Errorf("spans %s: %d, want %d", k, spanCount[k], n)
		}
	}
	if len(spanCount) != len(wantSpans) {
		t.Errorf("spans %v, want %v", spanCount, wantSpans)
	}
}

func key(s attribute.Set) string {
	op, _ := s.Value("casebook.operation")
	outcome, _ := s.Value("casebook.outcome")
	reason, _ := s.Value("casebook.reason")
	return op.AsString() + "/" + outcome.AsString() + "/" + reason.AsString()
}
