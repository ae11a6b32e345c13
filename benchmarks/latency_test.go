package main

import (
	"errors"
	"testing"
	"time"
)

// do runs op as rate's workers do.
func do(t *opTimer, op func() error) error {
	if t.untimed() {
		return op()
	}
	return t.timed(op)
}

// A sampled timer's histogram still counts every op: each timed op stands
// for the untimed ones after it (up to one stride's worth at the end).
func TestOpTimerCountsEveryOp(t *testing.T) {
	for _, op := range []struct {
		name string
		n    int64
		f    func() error
	}{
		{"nanoseconds", 20000, func() error { return nil }},
		{"sleeps", 100, func() error { time.Sleep(50 * time.Microsecond); return nil }},
	} {
		timer := newOpTimer()
		n := op.n
		for range n {
			if err := do(timer, op.f); err != nil {
				t.Fatal(err)
			}
		}
		got := timer.hist.TotalCount()
		if got < n || got > n+maxStride {
			t.Errorf("%s: histogram counts %d ops, ran %d", op.name, got, n)
		}
	}
}

// Slow ops are all timed, and their latency is what they took.
func TestOpTimerTimesSlowOps(t *testing.T) {
	timer := newOpTimer()
	slow := max(2*sampleBudget(), time.Millisecond)
	for range 5 {
		do(timer, func() error { time.Sleep(slow); return nil })
	}
	if got := timer.hist.TotalCount(); got != 5 {
		t.Fatalf("recorded %d ops of 5", got)
	}
	if l := summarise(timer.hist); l.P50 < float64(slow.Microseconds()) || l.P50 > 20*float64(slow.Microseconds()) {
		t.Fatalf("p50 %.0fµs for ops sleeping %v", l.P50, slow)
	}
}

// A failed op is not recorded and its error comes back.
func TestOpTimerSkipsFailures(t *testing.T) {
	timer := newOpTimer()
	boom := errors.New("boom")
	if err := do(timer, func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	if timer.hist.TotalCount() != 0 || summarise(timer.hist) != nil || distribution(timer.hist) != nil {
		t.Fatal("a failed op was recorded")
	}
}

// The distribution rises with the percentile and ends at the max.
func TestDistribution(t *testing.T) {
	h := newLatencyHistogram()
	for i := int64(1); i <= 10000; i++ {
		h.RecordValue(i * 1000)
	}
	pts := distribution(h)
	if len(pts) < 30 || pts[len(pts)-1].Percentile != 100 || pts[len(pts)-1].Micros != summarise(h).Max {
		t.Fatalf("%d points, last %+v", len(pts), pts[len(pts)-1])
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].Percentile <= pts[i-1].Percentile || pts[i].Micros < pts[i-1].Micros {
			t.Fatalf("not monotonic at %d: %+v %+v", i, pts[i-1], pts[i])
		}
	}
}

// What timing costs an op of a few nanoseconds: compare "bare" with
// "sampled" (what rate does) and "every-op" (a clock reading around every
// op, which sampling avoids).
func BenchmarkOpTimer(b *testing.B) {
	var x uint64
	op := func() error { x = x*6364136223846793005 + 1; return nil }
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			op()
		}
	})
	b.Run("sampled", func(b *testing.B) {
		timer := newOpTimer()
		for b.Loop() {
			if timer.untimed() {
				op()
			} else {
				timer.timed(op)
			}
		}
	})
	b.Run("every-op", func(b *testing.B) {
		timer := newOpTimer()
		timer.budget = 0
		for b.Loop() {
			if timer.untimed() {
				op()
			} else {
				timer.timed(op)
			}
		}
		b.ReportMetric(float64(clockCost().Nanoseconds()), "clock-ns")
	})
}
