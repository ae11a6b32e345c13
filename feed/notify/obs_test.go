package notify_test

import (
	"errors"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/feed/notify"
	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// TestMetricsAndSpans: a scripted run read with the SDK's manual reader
// and an in-memory span exporter; every count is exact.
func TestMetricsAndSpans(t *testing.T) {
	reader, mp, spans, tp := obstest.NewSDK()
	x := newFixture(t, testenv.NewRedis(t), notify.Config{MeterProvider: mp, TracerProvider: tp})
	a := notify.Activity{ID: "1", Actor: "bob", Verb: "like", Object: "post:1", Target: "alice", Time: x.clk.Now()}
	for range 2 { // add 2: the second a duplicate, which is not a refusal
		if err := x.f.Add(x.ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.f.Add(x.ctx, notify.Activity{}); !errors.Is(err, notify.ErrInvalid) {
		t.Fatal(err)
	}
	v, _ := notify.Encode(notify.Activity{ID: "2", Actor: "carol", Verb: "like", Object: "post:1", Target: "alice", Time: x.clk.Now()})
	if err := x.f.Handle(x.ctx, nil, v); err != nil {
		t.Fatal(err)
	}
	if err := x.f.Handle(x.ctx, nil, []byte(`{"v":2}`)); !errors.Is(err, notify.ErrBadMessage) {
		t.Fatal(err)
	}
	stale, _ := notify.Encode(notify.Activity{ID: "3", Actor: "carol", Verb: "like", Object: "post:1", Target: "alice", Time: x.clk.Now().Add(-72 * time.Hour)})
	if err := x.f.Handle(x.ctx, nil, stale); !errors.Is(err, notify.ErrBadMessage) {
		t.Fatal(err)
	}
	if p, err := x.f.Groups(x.ctx, "alice", "", 10); err != nil || len(p.Groups) != 1 || p.Groups[0].ActorCount != 2 {
		t.Fatalf("%+v, %v", p, err)
	}
	if _, err := x.f.Groups(x.ctx, "alice", "junk", 10); !errors.Is(err, notify.ErrCursor) {
		t.Fatal(err)
	}
	if _, err := x.f.Groups(x.ctx, "alice", "", 0); !errors.Is(err, notify.ErrInvalid) {
		t.Fatal(err)
	}
	if c := x.counts("alice"); c != (notify.Counts{Unseen: 1, Unread: 1}) {
		t.Fatal(c)
	}
	if _, err := x.f.MarkSeen(x.ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if c, err := x.f.MarkRead(x.ctx, "alice"); err != nil || c != (notify.Counts{}) {
		t.Fatal(c, err)
	}
	if _, err := x.f.MarkRead(x.ctx, "alice", "bad id"); !errors.Is(err, notify.ErrInvalid) {
		t.Fatal(err)
	}

	want := map[string]float64{}
	for _, c := range []struct {
		name, outcome, reason string
		n                     float64
	}{
		{"add", "ok", "", 2}, {"add", "refused", "invalid", 1},
		{"handle", "ok", "", 1}, {"handle", "refused", "poison", 2},
		{"groups", "ok", "", 1}, {"groups", "refused", "cursor", 1}, {"groups", "refused", "invalid", 1},
		{"counts", "ok", "", 1},
		{"mark_seen", "ok", "", 1},
		{"mark_read", "ok", "", 1}, {"mark_read", "refused", "invalid", 1},
	} {
		obstest.AddOp(want, "notify", c.name, c.outcome, c.reason, c.n)
	}
	obstest.Expect(t, obstest.Points(t, reader), want)
	obstest.ExpectSpans(t, spans, map[string]int{"notify.add": 3, "notify.handle": 3, "notify.groups": 3,
		"notify.counts": 1, "notify.mark_seen": 1, "notify.mark_read": 2})
}
