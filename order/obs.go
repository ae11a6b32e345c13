package order

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/shard"
)

// instruments are the Service's metrics and spans (see doc.go,
// Observability).
type instruments struct {
	block *obs.Block
	create, createBatch, byRequest, get, getMany, userOrders, search, stats, daily,
	putSKU, createSKU, stockOf, reserve, confirm, cancel, holds,
	cancelOrder, complete, runDue, expire, sweep, migrate,
	startPayment, startPaymentRequest, paymentOf, handleCallback, serveCallback,
	reconcile, recoverPayments,
	requestRefund, refundLines, refundPaid, refunds, refundOf,
	shipParcel, ship, parcels, relayOutbox, pendingEvents *obs.Op
	callbacks metric.Int64Counter
	refundsN  metric.Int64Counter
	callback  map[string]metric.AddOption // by callback result
	refund    map[[2]string]metric.AddOption
	gauges    *obs.Registration
}

// Callback results, as casebook.order.callbacks counts them.
const (
	cbPaid           = "paid"            // applied: the order is paid
	cbRefund         = "refund"          // applied: money for an order that cannot take it, refunded
	cbFailed         = "failed"          // applied: the gateway reports a failed attempt
	cbReplayed       = "replayed"        // a repeat of a callback already decided: nothing written
	cbMismatch       = "amount_mismatch" // refused: amount or currency differs from the attempt's (recorded)
	cbUnknownPayment = "unknown_payment" // refused: no such payment attempt (nothing written)
	cbMalformed      = "malformed"       // refused: a body or fields that do not parse
	cbForged         = "forged"          // refused by CallbackHandler: bad signature or timestamp
)

// Refund results and kinds, as casebook.order.refunds counts them.
const (
	refundRequested = "requested" // a new refund recorded (with its kind)
	refundReplayed  = "replayed"  // a repeat of a request, or of RefundPaid, that changed nothing
	refundPaidBack  = "paid_back" // RefundPaid marked it done

	kindAmount  = "amount"  // RequestRefund
	kindLines   = "lines"   // RefundLines
	kindPayment = "payment" // money a callback brought for an order that could not take it
)

// reasons are the refusals, as the metrics name them; the first match
// wins, so more specific errors come first.
var reasons = []obs.Reason{
	{Err: ErrBadCursor, Name: "bad_cursor"},
	{Err: ErrInvalid, Name: "invalid"},
	{Err: ErrNotFound, Name: "not_found"},
	{Err: ErrIllegalTransition, Name: "illegal_transition"},
	{Err: ErrConflict, Name: "conflict"},
	{Err: ErrOutOfStock, Name: "out_of_stock"},
	{Err: ErrHanging, Name: "hanging"},
	{Err: ErrRefundTooLarge, Name: "refund_too_large"},
	{Err: ErrQuantity, Name: "quantity"},
	{Err: ErrSignature, Name: "signature"},
	{Err: errTooLarge, Name: "too_large"},
	{Err: errMethod, Name: "method"},
}

// callbackReasons are the reasons of a refused callback (ErrCallback).
var callbackReasons = []string{cbMismatch, cbUnknownPayment}

// Refusals of CallbackHandler that are no sentinel of the package.
var (
	errTooLarge = errors.New("order: callback body too large")
	errMethod   = errors.New("order: callback method not allowed")
)

// refusal is an error that names its metric reason; it reads and unwraps
// as the error it carries.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// refused marks err with reason for the metrics; err's text and chain are
// unchanged.
func refused(reason string, err error) error { return &refusal{reason: reason, err: err} }

func classify(err error) (string, string) {
	if r, ok := errors.AsType[*refusal](err); ok {
		return obs.Refused, r.reason
	}
	if name, ok := obs.Match(err, reasons); ok {
		return obs.Refused, name
	}
	return obs.Error, ""
}

func newInstruments(s *Service, mp metric.MeterProvider, tp trace.TracerProvider) *instruments {
	b := obs.NewBlock("order", mp, tp)
	names := append(obs.Names(reasons), callbackReasons...)
	op := func(name string) *obs.Op { return b.Op(name, classify, names...) }
	in := &instruments{block: b,
		create: op("create"), createBatch: op("create_batch"), byRequest: op("by_request"), get: op("get"), getMany: op("get_many"),
		userOrders: op("user_orders"), search: op("search"), stats: op("stats"), daily: op("daily"),
		putSKU: op("put_sku"), createSKU: op("create_sku"), stockOf: op("stock_of"),
		reserve: op("reserve"), confirm: op("confirm"), cancel: op("cancel"), holds: op("holds"),
		cancelOrder: op("cancel_order"), complete: op("complete"), runDue: op("run_due"), expire: op("expire"),
		sweep: op("sweep"), migrate: op("migrate"),
		startPayment: op("start_payment"), startPaymentRequest: op("start_payment_request"), paymentOf: op("payment_of"),
		handleCallback: op("handle_callback"), serveCallback: op("serve_callback"),
		reconcile: op("reconcile"), recoverPayments: op("recover_payments"),
		requestRefund: op("request_refund"), refundLines: op("refund_lines"), refundPaid: op("refund_paid"),
		refunds: op("refunds"), refundOf: op("refund_of"),
		shipParcel: op("ship_parcel"), ship: op("ship"), parcels: op("parcels"),
		relayOutbox: op("relay_outbox"), pendingEvents: op("pending_events"),
		callback: map[string]metric.AddOption{}, refund: map[[2]string]metric.AddOption{},
	}
	m := b.Meter()
	var err error
	in.callbacks, err = m.Int64Counter("casebook.order.callbacks", metric.WithUnit("{callback}"),
		metric.WithDescription("Payment callbacks by result: applied (paid, refund, failed), replayed, or refused (amount_mismatch, unknown_payment, malformed, forged)."))
	obs.Handle(err)
	in.refundsN, err = m.Int64Counter("casebook.order.refunds", metric.WithUnit("{refund}"),
		metric.WithDescription("Refunds by result (requested, with their kind: amount, lines, payment; replayed; paid_back)."))
	obs.Handle(err)
	for _, r := range []string{cbPaid, cbRefund, cbFailed, cbReplayed, cbMismatch, cbUnknownPayment, cbMalformed, cbForged} {
		in.callback[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("casebook.order.callback.result", r)))
	}
	for _, k := range []string{kindAmount, kindLines, kindPayment} {
		in.refund[[2]string{refundRequested, k}] = metric.WithAttributeSet(attribute.NewSet(
			attribute.String("casebook.order.refund.result", refundRequested), attribute.String("casebook.order.refund.kind", k)))
	}
	for _, r := range []string{refundReplayed, refundPaidBack} {
		in.refund[[2]string{r, ""}] = metric.WithAttributeSet(attribute.NewSet(attribute.String("casebook.order.refund.result", r)))
	}
	overdue, err := m.Int64ObservableGauge("casebook.order.overdue", metric.WithUnit("{order}"),
		metric.WithDescription("Pending orders past their payment deadline, not closed yet (read at collection: one indexed COUNT per order table)."))
	obs.Handle(err)
	in.gauges = obs.Register(m, func(ctx context.Context, o metric.Observer) error {
		if n, err := s.overdue(ctx); err == nil { // no figure rather than a wrong one
			o.ObserveInt64(overdue, n)
		}
		return nil
	}, overdue)
	return in
}

// counted adds one callback of result, when metrics are wanted.
func (in *instruments) counted(ctx context.Context, result string) {
	if in.block.Metering() {
		in.callbacks.Add(ctx, 1, in.callback[result])
	}
}

// refunded adds one refund of result (and kind, for a requested one), when
// metrics are wanted.
func (in *instruments) refunded(ctx context.Context, result, kind string) {
	if in.block.Metering() {
		in.refundsN.Add(ctx, 1, in.refund[[2]string{result, kind}])
	}
}

// overdueTimeout bounds the overdue gauge's reading.
const overdueTimeout = 2 * time.Second

// overdue counts the pending orders past their payment deadline over every
// order table: one COUNT per table on its (status, pay_deadline) index,
// which reads only the rows it counts — few, while RunDue and Sweep keep up.
func (s *Service) overdue(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, overdueTimeout)
	defer cancel()
	now := s.now()
	counts, err := shard.Gather(ctx, s.orders.All(), 16, func(ctx context.Context, sh shard.Shard) ([]int64, error) {
		var n int64
		err := sh.DB.GetContext(ctx, &n, `SELECT COUNT(*) FROM `+sh.Table+` WHERE status = ? AND pay_deadline <= ?`, string(Pending), now)
		return []int64{n}, err
	}, func(a, b int64) bool { return false }, 0)
	var total int64
	for _, n := range counts {
		total += n
	}
	return total, err
}
