package signin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/signin"
)

// opCounter tallies what a scripted run expects, as "operation outcome[
// reason]" → count.
type opCounter map[string]float64

var reasons = []struct {
	err    error
	reason string
}{
	{signin.ErrInvalidUser, "invalid"}, {signin.ErrOutsideWindow, "outside_window"}, {signin.ErrNoCard, "no_card"},
	{signin.ErrAlreadySigned, "already_signed"}, {signin.ErrBadTask, "bad_task"}, {outbox.ErrPoison, "poison"},
}

// check fails t unless err is want (nil: no error) and counts the
// operation: ok, or refused for want's reason (errInput: "invalid").
func (c opCounter) check(t *testing.T, op string, err, want error) {
	t.Helper()
	if want == nil && err != nil || want != nil && want != errInput && !errors.Is(err, want) || want == errInput && err == nil {
		t.Fatalf("%s: %v, want %v", op, err, want)
	}
	c.count(op, want)
}

// errInput stands for bad input that no exported sentinel names.
var errInput = errors.New("bad input")

func (c opCounter) count(op string, want error) {
	key := op + " ok"
	if want == errInput {
		key = op + " refused invalid"
	}
	for _, r := range reasons {
		if want == r.err {
			key = op + " refused " + r.reason
		}
	}
	c[key]++
}

// points are the operations and durations c expects, as obstest.Points
// names them, and the spans as "signin.<op> <outcome>" → count.
func (c opCounter) points() (map[string]float64, map[string]int) {
	want, spans := map[string]float64{}, map[string]int{}
	for k, n := range c {
		parts := strings.Fields(k)
		obstest.AddOp(want, "signin", parts[0], parts[1], strings.Join(parts[2:], ""), n)
		spans["signin."+parts[0]+" "+parts[1]] += int(n)
	}
	return want, spans
}

// A scripted run read through the OpenTelemetry SDK: three users sign in
// and one again, bad input, make-ups with and without a card, freezes, the
// reads, a backup and its restore — every counter, the reward backlog and
// the spans exact; after Close the backlog is no longer collected.
func TestMetricsAndSpans(t *testing.T) {
	ctx := context.Background()
	reader, mp, spans, tp := obstest.NewSDK()
	r := testenv.NewRedis(t)
	clk := &testenv.Clock{}
	d := day(y0, 11, 30)
	clk.Set(noon(d))
	s := newService(t, r, clk, signin.Config{Buckets: 4, MeterProvider: mp, TracerProvider: tp})
	_, db := newLedger(t) // the backup table

	c := opCounter{}
	for _, u := range []string{"u1", "u2", "u3"} {
		_, err := s.Sign(ctx, u, clk.Now())
		c.check(t, "sign", err, nil)
	}
	if res, err := s.Sign(ctx, "u1", clk.Now()); !res.AlreadySigned || err != nil {
		t.Fatalf("signing again: %+v, %v", res, err)
	}
	c.count("sign", signin.ErrAlreadySigned) // answered AlreadySigned, counted as refused
	_, err := s.Sign(ctx, "no spaces", clk.Now())
	c.check(t, "sign", err, signin.ErrInvalidUser)
	_, err = s.Sign(ctx, "u1", noon(day(y0-3, 6, 1)))
	c.check(t, "sign", err, signin.ErrOutsideWindow)

	_, err = s.MakeUp(ctx, "u1", d.AddDays(-1))
	c.check(t, "make_up", err, signin.ErrNoCard)
	c.check(t, "add_cards", s.AddCards(ctx, "u1", 0), errInput)
	c.check(t, "add_cards", s.AddCards(ctx, "u1", 1), nil)
	_, err = s.MakeUp(ctx, "u1", d.AddDays(-1))
	c.check(t, "make_up", err, nil)
	_, err = s.MakeUp(ctx, "u1", d.AddDays(-1))
	c.check(t, "make_up", err, signin.ErrAlreadySigned)
	_, err = s.MakeUp(ctx, "u1", d)
	c.check(t, "make_up", err, signin.ErrOutsideWindow)

	_, err = s.AddFreezes(ctx, "u2", 1, "g1")
	c.check(t, "add_freezes", err, nil)
	_, err = s.AddFreezes(ctx, "u2", 0, "g2")
	c.check(t, "add_freezes", err, errInput)
	_, err = s.ApplyFreezes(ctx, "u2")
	c.check(t, "apply_freezes", err, nil)
	_, err = s.Stats(ctx, "u1")
	c.check(t, "stats", err, nil)
	_, err = s.Stats(ctx, "")
	c.check(t, "stats", err, signin.ErrInvalidUser)
	_, err = s.Status(ctx, "u1", d)
	c.check(t, "status", err, nil)
	_, err = s.History(ctx, "u1", d.AddDays(-7), d)
	c.check(t, "history", err, nil)
	_, err = s.History(ctx, "u1", d, d.AddDays(-7))
	c.check(t, "history", err, errInput)
	_, err = s.FrozenDays(ctx, "u2", d.AddDays(-7), d)
	c.check(t, "frozen_days", err, nil)
	_, err = s.Streak(ctx, "u1", clk.Now())
	c.check(t, "streak", err, nil)
	_, err = s.MonthCount(ctx, "u1", d.Year, d.Month)
	c.check(t, "month_count", err, nil)
	_, err = s.Backup(ctx, db, d.Year, d.Month)
	c.check(t, "backup", err, nil)
	_, err = s.Restore(ctx, db, d.Year, d.Month)
	c.check(t, "restore", err, nil)

	want, wantSpans := c.points()
	// Four tasks wait in the outboxes: three sign-ins and a make-up, daily
	// points each (no bonus yet).
	want["casebook.signin.rewards.backlog"] = 4
	obstest.Expect(t, obstest.Points(t, reader), want)
	obstest.ExpectSpanOutcomes(t, spans, wantSpans)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("closing again: %v", err)
	}
	delete(want, "casebook.signin.rewards.backlog")
	obstest.Expect(t, obstest.Points(t, reader), want)
}

// The Ledger, given providers by LedgerMeterProvider and
// LedgerTracerProvider: grants new and repeated, a bad task, reward
// messages good, repeated and poison, and the reads — counted and traced
// exactly.
func TestLedgerMetrics(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewInMemoryExporter()
	l, _ := newLedger(t, signin.LedgerMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		signin.LedgerTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))))

	c := opCounter{}
	day := testenv.Now().UTC()
	yesterday, today := day.AddDate(0, 0, -1).Format(time.DateOnly), day.Format(time.DateOnly)
	task := signin.Task{User: "u1", Date: yesterday, Kind: "daily", Points: 10}
	granted, err := l.Grant(ctx, task)
	if !granted {
		t.Fatal("a new task not granted")
	}
	c.check(t, "grant", err, nil)
	granted, err = l.Grant(ctx, task)
	if granted || err != nil {
		t.Fatalf("a task granted again: %v, %v", granted, err)
	}
	c["grant refused already_granted"]++ // answered false, counted as refused
	_, err = l.Grant(ctx, signin.Task{User: "u1", Date: yesterday, Kind: "weekly"})
	c.check(t, "grant", err, signin.ErrBadTask)
	next := signin.EncodeTask(signin.Task{User: "u1", Date: today, Kind: "daily", Points: 10})
	c.check(t, "handle_reward", l.Handle(ctx, []byte("u1"), next), nil)
	c.check(t, "handle_reward", l.Handle(ctx, []byte("u1"), next), nil) // a redelivery is handled
	c.check(t, "handle_reward", l.Handle(ctx, []byte("u1"), []byte(`{"v":1}`)), outbox.ErrPoison)
	balance, err := l.Balance(ctx, "u1")
	c.check(t, "balance", err, nil)
	entries, err := l.Entries(ctx, "u1")
	c.check(t, "entries", err, nil)
	if balance != 20 || entries != 2 {
		t.Fatalf("%d points in %d entries, want 20 in 2", balance, entries)
	}

	want, wantSpans := c.points()
	got := obstest.Points(t, reader)
	for k := range got {
		if !strings.HasPrefix(k, "casebook.signin.operation") {
			delete(got, k) // gauges of Services other tests left open
		}
	}
	obstest.Expect(t, got, want)
	obstest.ExpectSpanOutcomes(t, spans, wantSpans)
}
