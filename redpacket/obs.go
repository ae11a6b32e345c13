package redpacket

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
)

// instruments are the Service's metrics and spans (see doc.go,
// Observability).
type instruments struct {
	block *obs.Block

	send, deposit, balance, get, grab, open, openMany, handle *obs.Op
	refund, refundDue, reopen, claims, detail, sent, received *obs.Op
	archive, audit                                            *obs.Op

	opens  metric.Int64Counter // every open decided, by outcome and reason
	opened map[[2]string]metric.AddOption
	fenced metric.Int64Counter // refunds held back by the fence
	fence  [2]metric.AddOption // in_flight, lost_state
}

// refusals are the package's sentinels that refuse an operation (not a
// fault), as the metrics name them; the first that matches wins.
var refusals = []obs.Reason{
	{Err: ErrInvalid, Name: "invalid"},
	{Err: ErrInsufficientFunds, Name: "insufficient_funds"},
	{Err: ErrNotFound, Name: "not_found"},
	{Err: ErrExpired, Name: "expired"},
	{Err: ErrEmpty, Name: "empty"},
	{Err: ErrAlreadyClaimed, Name: "already_claimed"},
	{Err: ErrNotRecipient, Name: "not_recipient"},
	{Err: ErrNotExpired, Name: "not_expired"},
	{Err: ErrFence, Name: "fenced"},
	{Err: ErrLateClaim, Name: "late_claim"},
	{Err: ErrBadMessage, Name: "bad_message"},
}

var classify = obs.Refuse(refusals...)

// openReasons are the refusals an open can meet.
var openReasons = []string{"invalid", "not_found", "expired", "empty", "not_recipient"}

func newInstruments(mp metric.MeterProvider, tp trace.TracerProvider) *instruments {
	b := obs.NewBlock("redpacket", mp, tp)
	op := func(name string, reasons ...string) *obs.Op { return b.Op(name, classify, reasons...) }
	in := &instruments{block: b,
		send:      op("send", "invalid", "insufficient_funds"),
		deposit:   op("deposit", "invalid"),
		balance:   op("balance"),
		get:       op("get", "invalid", "not_found"),
		grab:      op("grab", "invalid", "not_found", "expired", "already_claimed", "not_recipient", "empty"),
		open:      op("open", openReasons...),
		openMany:  op("open_many"),
		handle:    op("handle_claims", "bad_message", "late_claim"),
		refund:    op("refund", "invalid", "not_found", "not_expired", "fenced"),
		refundDue: op("refund_due", "invalid"),
		reopen:    op("reopen"),
		claims:    op("claims", "invalid"),
		detail:    op("detail", "invalid", "not_found"),
		sent:      op("sent", "invalid"),
		received:  op("received", "invalid"),
		archive:   op("archive", "invalid"),
		audit:     op("audit"),
		opened:    map[[2]string]metric.AddOption{},
	}
	m := b.Meter()
	var err error
	in.opens, err = m.Int64Counter("casebook.redpacket.opens", metric.WithUnit("{open}"),
		metric.WithDescription("Opens decided, through Open and OpenMany alike, by outcome and refusal reason."))
	obs.Handle(err)
	in.fenced, err = m.Int64Counter("casebook.redpacket.refunds.fenced", metric.WithUnit("{refund}"),
		metric.WithDescription("Refunds held back by the fence (ErrFence): in_flight while claims Redis accepted are not in SQL yet, lost_state while a packet whose Redis state is gone waits out LostStateGrace."))
	obs.Handle(err)
	addSet := func(kv ...attribute.KeyValue) metric.AddOption {
		return metric.WithAttributeSet(attribute.NewSet(kv...))
	}
	for _, outcome := range []string{obs.OK, obs.Refused, obs.Canceled, obs.Error} {
		in.opened[[2]string{outcome, ""}] = addSet(obs.KeyOutcome.String(outcome))
	}
	for _, r := range openReasons {
		in.opened[[2]string{obs.Refused, r}] = addSet(obs.KeyOutcome.String(obs.Refused), obs.KeyReason.String(r))
	}
	key := attribute.Key("casebook.redpacket.fence")
	in.fence = [2]metric.AddOption{addSet(key.String("in_flight")), addSet(key.String("lost_state"))}
	return in
}

// outcomeOf is err's outcome and reason, as obs.Call.End decides them.
func outcomeOf(err error) (string, string) {
	switch {
	case err == nil:
		return obs.OK, ""
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return obs.Canceled, ""
	}
	return classify(err)
}

// decided counts the opens of res and returns what ends the batch's
// operation: the first result that is neither a share nor a refusal (nil
// when there is none; a batch is ok when every open was decided).
func (in *instruments) decided(ctx context.Context, res []OpenResult) error {
	metering := in.block.Metering()
	if !metering && !in.block.Tracing() {
		return nil
	}
	var failed error
	for _, r := range res {
		outcome, reason := outcomeOf(r.Err)
		if failed == nil && (outcome == obs.Error || outcome == obs.Canceled) {
			failed = r.Err
		}
		if !metering {
			continue
		}
		opt, ok := in.opened[[2]string{outcome, reason}]
		if !ok {
			opt = in.opened[[2]string{outcome, ""}]
		}
		in.opens.Add(ctx, 1, opt)
	}
	return failed
}

// fencedRefund counts a refund held back by the fence.
func (in *instruments) fencedRefund(ctx context.Context, lostState bool) {
	if !in.block.Metering() {
		return
	}
	opt := in.fence[0]
	if lostState {
		opt = in.fence[1]
	}
	in.fenced.Add(ctx, 1, opt)
}
