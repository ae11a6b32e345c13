package signin

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/outbox"
)

// instruments are the Service's metrics and spans (see doc.go,
// Observability).
type instruments struct {
	sign, makeUp, addCards, addFreezes, applyFreezes, stats *obs.Op
	status, history, frozenDays, streak, monthCount         *obs.Op
	backup, restore                                         *obs.Op

	gauges *obs.Registration
}

// ledgerInstruments are the Ledger's (see doc.go, Observability).
type ledgerInstruments struct {
	grant, handle, balance, entries *obs.Op
}

// errInvalidInput marks bad input that no exported sentinel names (a card
// count, a grant id, a range), for the metrics' reason; invalid wraps an
// error with it, keeping the error's text and what it matches.
var errInvalidInput = errors.New("signin: invalid input")

type invalidInput struct{ error }

func (e invalidInput) Unwrap() error      { return e.error }
func (invalidInput) Is(target error) bool { return target == errInvalidInput }
func invalid(err error) error             { return invalidInput{err} }

// errAlreadyGranted ends a Grant that found its task granted before: the
// call answers granted=false, with no error, and counts as a refusal.
var errAlreadyGranted = errors.New("signin: granted before")

// refusals are the sentinels that refuse an operation (not a fault), as the
// metrics name them; the first that matches wins.
var refusals = []obs.Reason{
	{Err: ErrInvalidUser, Name: "invalid"},
	{Err: errInvalidInput, Name: "invalid"},
	{Err: ErrOutsideWindow, Name: "outside_window"},
	{Err: ErrNoCard, Name: "no_card"},
	{Err: ErrAlreadySigned, Name: "already_signed"},
	{Err: ErrBadTask, Name: "bad_task"},
	{Err: errAlreadyGranted, Name: "already_granted"},
}

var classify = obs.Refuse(refusals...)

func newInstruments(s *Service, mp metric.MeterProvider, tp trace.TracerProvider) *instruments {
	b := obs.NewBlock("signin", mp, tp)
	op := func(name string, reasons ...string) *obs.Op { return b.Op(name, classify, reasons...) }
	in := &instruments{
		sign:         op("sign", "invalid", "outside_window", "already_signed"),
		makeUp:       op("make_up", "invalid", "outside_window", "no_card", "already_signed"),
		addCards:     op("add_cards", "invalid"),
		addFreezes:   op("add_freezes", "invalid"),
		applyFreezes: op("apply_freezes", "invalid"),
		stats:        op("stats", "invalid"),
		status:       op("status", "invalid"),
		history:      op("history", "invalid"),
		frozenDays:   op("frozen_days", "invalid"),
		streak:       op("streak", "invalid"),
		monthCount:   op("month_count", "invalid"),
		backup:       op("backup"),
		restore:      op("restore", "invalid"),
	}
	backlog, err := b.Meter().Int64ObservableGauge("casebook.signin.rewards.backlog", metric.WithUnit("{task}"),
		metric.WithDescription("Reward tasks recorded by sign-ins and make-ups and not yet relayed from the outbox streams (Σ XLEN at collection)."))
	obs.Handle(err)
	outboxes := s.Outboxes()
	in.gauges = obs.Register(b.Meter(), func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		pipe := s.rdb.Pipeline()
		lens := make([]*redis.IntCmd, len(outboxes))
		for i, key := range outboxes {
			lens[i] = pipe.XLen(ctx, key)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil // no figure rather than a wrong one
		}
		var n int64
		for _, l := range lens {
			n += l.Val()
		}
		o.ObserveInt64(backlog, n)
		return nil
	}, backlog)
	return in
}

// close unregisters the backlog gauge; safe to call twice.
func (in *instruments) close() error {
	return in.gauges.Close()
}

// newLedgerInstruments makes the Ledger's instruments on mp and tp (nil:
// the global providers).
func newLedgerInstruments(mp metric.MeterProvider, tp trace.TracerProvider) *ledgerInstruments {
	b := obs.NewBlock("signin", mp, tp)
	return &ledgerInstruments{
		grant:   b.Op("grant", classify, "bad_task", "already_granted"),
		handle:  b.Op("handle_reward", obs.RefuseIf(outbox.ErrPoison, "poison"), "poison"),
		balance: b.Op("balance", nil),
		entries: b.Op("entries", nil),
	}
}
