package hotlist_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// TestMetricsAndSpans: a scripted run through a list and its aggregator,
// read with the SDK's manual reader and an in-memory span exporter; every
// count is exact.
func TestMetricsAndSpans(t *testing.T) {
	ctx := context.Background()
	reader, mp, spans, tp := obstest.NewSDK()
	f := newFixture(t, testenv.NewRedis(t), hotlist.Config{Partitions: 2, Weights: dyadic(), MeterProvider: mp, TracerProvider: tp})
	t.Cleanup(func() { f.a.Close() })

	now := f.clk.Now()
	var events []hotlist.Event
	for i, item := range []string{"a", "b", "c", "d", "a", "b"} {
		events = append(events, hotlist.Event{Item: item, Kind: hotlist.View, At: now.Add(time.Duration(-i) * time.Second)})
	}
	f.send(events...) // 6 events in one message per partition that has items
	sent := slices.Clone(f.next)
	c0 := f.claims[0]
	if err := c0.Add(f.next[0], []byte{hotlist.BatchVersion, 0}); !errors.Is(err, hotlist.ErrMalformed) {
		t.Fatalf("a malformed batch: %v", err)
	}
	f.next[0]++
	if err := c0.Add(0, []byte("redelivered")); err != nil {
		t.Fatalf("a redelivery: %v", err)
	}
	future, err := hotlist.EncodeMessages("t", 2, 0, []hotlist.Event{{Item: itemOn(0, 2), Kind: hotlist.View, At: now.Add(time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c0.Add(f.next[0], future[0].Value); !errors.Is(err, hotlist.ErrRejected) {
		t.Fatalf("an event from the future: %v", err)
	}
	f.next[0]++

	f.clk.Add(3 * time.Second)
	got := obstest.Points(t, reader)
	if lag := got["casebook.hotlist.flush.lag casebook.hotlist.list=hot"]; lag != 3 {
		t.Fatalf("flush lag %v s before any flush, want 3 (the clock moved 3 s since the first add)", lag)
	}
	f.flush()
	if _, err := f.a.Claim(ctx, 2); !errors.Is(err, hotlist.ErrInvalid) {
		t.Fatalf("claim of partition 2 of 2: %v", err)
	}
	if top, err := f.l.Top(ctx, 3); err != nil || len(top) != 3 {
		t.Fatalf("top 3: %v, %v", top, err)
	}
	if _, err := f.l.Top(ctx, -1); !errors.Is(err, hotlist.ErrInvalid) {
		t.Fatalf("top -1: %v", err)
	}
	if _, err := f.l.Snapshot(ctx); !errors.Is(err, hotlist.ErrNoSnapshot) {
		t.Fatalf("snapshot before publishing: %v", err)
	}
	if _, err := f.l.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the first reads the snapshot, the others are served from memory
		if _, err := f.l.TopCached(ctx, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.l.Pin(ctx, "d", 1); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Pin(ctx, "d", 0); !errors.Is(err, hotlist.ErrInvalid) {
		t.Fatalf("pin at 0: %v", err)
	}
	if err := f.l.Block(ctx, ""); !errors.Is(err, hotlist.ErrInvalid) {
		t.Fatalf("block of an empty item: %v", err)
	}

	const list = "casebook.hotlist.list=hot"
	want := map[string]float64{
		"casebook.hotlist.events " + list + ",casebook.hotlist.result=aggregated":  6,
		"casebook.hotlist.events " + list + ",casebook.hotlist.result=rejected":    1,
		"casebook.hotlist.events " + list + ",casebook.hotlist.result=expired":     0,
		"casebook.hotlist.messages " + list + ",casebook.hotlist.result=malformed": 1,
		"casebook.hotlist.messages " + list + ",casebook.hotlist.result=duplicate": 1,
		// partition 0 holds the malformed and the rejected messages'
		// offsets, so its flush applies whether or not an event landed there
		"casebook.hotlist.flushes " + list + ",casebook.hotlist.result=applied":  float64(1 + boolInt(sent[1] > 0)),
		"casebook.hotlist.flushes " + list + ",casebook.hotlist.result=replayed": 0,
		"casebook.hotlist.flushed.entries " + list:                               4, // a, b, c, d
		"casebook.hotlist.resyncs " + list:                                       0,
		"casebook.hotlist.flush.fallbacks " + list:                               0,
		"casebook.hotlist.flush.lag " + list:                                     0,
		"casebook.hotlist.claims " + list:                                        2,
	}
	for _, c := range []struct {
		op, outcome, reason string
		n                   float64
	}{
		{"claim", "ok", "", 2},
		{"claim", "refused", "invalid", 1},
		{"flush", "ok", "", 2},
		{"top", "ok", "", 1},
		{"top", "refused", "invalid", 1},
		{"snapshot", "refused", "no_snapshot", 1},
		{"snapshot", "ok", "", 1}, // TopCached's miss
		{"publish", "ok", "", 1},
		{"pin", "ok", "", 1},
		{"pin", "refused", "invalid", 1},
		{"block", "refused", "invalid", 1},
	} {
		obstest.AddOp(want, "hotlist", c.op, c.outcome, c.reason, c.n)
	}
	obstest.Expect(t, obstest.Points(t, reader), want)

	wantSpans := map[string]int{"hotlist.claim": 3, "hotlist.flush": 2, "hotlist.top": 2, "hotlist.snapshot": 2,
		"hotlist.publish": 1, "hotlist.pin": 2, "hotlist.block": 1}
	obstest.ExpectSpans(t, spans, wantSpans)

	extra, err := f.a.Claim(ctx, 1) // a second consumer of partition 1, stopped without a flush
	if err != nil {
		t.Fatal(err)
	}
	if err := extra.Add(f.next[1]+100, []byte{hotlist.BatchVersion, 0}); !errors.Is(err, hotlist.ErrMalformed) {
		t.Fatal(err)
	}
	if n := obstest.Points(t, reader)["casebook.hotlist.claims "+list]; n != 3 {
		t.Fatalf("%v open claims, want 3", n)
	}
	for range 2 {
		if err := extra.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := extra.Flush(ctx); !errors.Is(err, hotlist.ErrClosed) {
		t.Fatalf("flush after Close: %v", err)
	}
	for _, c := range f.claims {
		if err := c.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := obstest.Points(t, reader)["casebook.hotlist.claims "+list]; n != 0 {
		t.Fatalf("%v open claims after releasing both, want 0", n)
	}
	if err := f.a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, ok := obstest.Points(t, reader)["casebook.hotlist.claims "+list]; ok {
		t.Fatal("a closed aggregator still reports")
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
