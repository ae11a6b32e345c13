package order

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// Payment is one payment attempt for an order. A buyer may start several
// (retry, switch channel); at most one pays the order, and any other that
// succeeds at the gateway is refunded.
type Payment struct {
	PayNo      int64  `db:"pay_no"` // sent to the gateway as its order number
	OrderID    int64  `db:"order_id"`
	Channel    string `db:"channel"`
	Amount     int64  `db:"amount"`
	Currency   string `db:"currency"`
	Status     string `db:"status"` // created, succeeded, failed
	GatewayTxn string `db:"gateway_txn"`
	CreatedAt  int64  `db:"created_at"`
	PaidAt     int64  `db:"paid_at"`
}

// Payment attempt statuses.
const (
	PaymentCreated   = "created"
	PaymentSucceeded = "succeeded"
	PaymentFailed    = "failed"
)

// StartPayment records a payment attempt for a pending, reserved order,
// for the order's full amount, and returns it (its PayNo is what the gateway
// is asked to collect). Every call makes a new attempt — a buyer may retry
// or switch channel, and of several attempts that collect, one pays the
// order and the others become refunds — so a client that may send one
// request twice (a double click, a retry after a lost reply) should call
// StartPaymentRequest instead.
func (s *Service) StartPayment(ctx context.Context, orderID int64, channel string) (Payment, error) {
	ctx, call := s.obs.startPayment.Start(ctx)
	p, err := s.startPayment(ctx, orderID, channel, "")
	return p, call.End(err)
}

// StartPaymentRequest is StartPayment made idempotent by requestID (1..64
// printable ASCII, per order): the first call records the attempt, and
// every repeat — concurrent, or after a lost reply, even once the order is
// paid — returns that same attempt and records nothing. A repeat naming
// another channel is ErrInvalid. A different request id makes another
// attempt, as StartPayment does.
func (s *Service) StartPaymentRequest(ctx context.Context, orderID int64, channel, requestID string) (Payment, error) {
	ctx, call := s.obs.startPaymentRequest.Start(ctx)
	p, err := s.startPaymentRequest(ctx, orderID, channel, requestID)
	return p, call.End(err)
}

func (s *Service) startPaymentRequest(ctx context.Context, orderID int64, channel, requestID string) (Payment, error) {
	if err := validUser(requestID); err != nil {
		return Payment{}, fmt.Errorf("%w: request id %q", ErrInvalid, requestID)
	}
	return s.startPayment(ctx, orderID, channel, requestID)
}

func (s *Service) startPayment(ctx context.Context, orderID int64, channel, requestID string) (Payment, error) {
	if channel == "" || len(channel) > 32 {
		return Payment{}, fmt.Errorf("%w: channel %q", ErrInvalid, channel)
	}
	if orderID <= 0 {
		return Payment{}, fmt.Errorf("%w: order id %d", ErrInvalid, orderID)
	}
	sh := s.shardOfID(orderID)
	dedupe := dedupeKey("pay-req", strconv.FormatInt(orderID, 10), requestID)
	if requestID != "" {
		if p, err := s.paymentByRequest(ctx, sh, dedupe, channel); err == nil || !errors.Is(err, ErrNotFound) {
			return p, err
		}
	}
	o, err := s.get(ctx, orderID)
	if err != nil {
		return Payment{}, err
	}
	if o.Status != Pending || !o.Reserved {
		if requestID != "" { // a twin of the request may have started it, and it paid since
			if p, err := s.paymentByRequest(ctx, sh, dedupe, channel); err == nil || !errors.Is(err, ErrNotFound) {
				return p, err
			}
		}
		return Payment{}, fmt.Errorf("%w: order %d is %s (reserved %v), not payable", ErrIllegalTransition, o.ID, o.Status, o.Reserved)
	}
	payNo, err := s.newID(ctx, o.User)
	if err != nil {
		return Payment{}, err
	}
	p := Payment{PayNo: payNo, OrderID: o.ID, Channel: channel, Amount: o.Amount, Currency: o.Currency, Status: PaymentCreated, CreatedAt: s.now()}
	err = inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		if requestID != "" {
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+gene.Sibling(sh, "pay_requests")+` (dedupe, pay_no) VALUES (?, ?)`, dedupe, payNo); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO `+gene.Sibling(sh, "payments")+` (pay_no, order_id, channel, amount, currency, status, gateway_txn, created_at, paid_at)
			VALUES (?, ?, ?, ?, ?, ?, NULL, ?, 0)`, p.PayNo, p.OrderID, p.Channel, p.Amount, p.Currency, p.Status, p.CreatedAt)
		return err
	})
	if requestID != "" && sqlutil.IsDuplicate(err) { // a concurrent twin of the request won
		return s.paymentByRequest(ctx, sh, dedupe, channel)
	}
	if err != nil {
		return Payment{}, fmt.Errorf("order: start payment: %w", err)
	}
	return p, nil
}

// paymentByRequest returns the attempt a StartPaymentRequest recorded
// under dedupe, or ErrNotFound.
func (s *Service) paymentByRequest(ctx context.Context, sh shard.Shard, dedupe, channel string) (Payment, error) {
	var payNo int64
	err := sh.DB.GetContext(ctx, &payNo, `SELECT pay_no FROM `+gene.Sibling(sh, "pay_requests")+` WHERE dedupe = ?`, dedupe)
	if errors.Is(err, sql.ErrNoRows) {
		return Payment{}, fmt.Errorf("%w: payment request", ErrNotFound)
	}
	if err != nil {
		return Payment{}, fmt.Errorf("order: read payment request: %w", err)
	}
	p, err := s.loadPayment(ctx, sh.DB, sh, payNo, false)
	if err == nil && p.Channel != channel {
		return Payment{}, fmt.Errorf("%w: the request started payment %d on channel %s, not %s", ErrInvalid, p.PayNo, p.Channel, channel)
	}
	return p, err
}

// PaymentOf returns payment attempt payNo.
func (s *Service) PaymentOf(ctx context.Context, payNo int64) (Payment, error) {
	ctx, call := s.obs.paymentOf.Start(ctx)
	p, err := s.paymentOf(ctx, payNo)
	return p, call.End(err)
}

func (s *Service) paymentOf(ctx context.Context, payNo int64) (Payment, error) {
	sh := s.shardOfID(payNo)
	return s.loadPayment(ctx, sh.DB, sh, payNo, false)
}

func (s *Service) loadPayment(ctx context.Context, q querier, sh shard.Shard, payNo int64, lock bool) (Payment, error) {
	var p Payment
	err := q.GetContext(ctx, &p, `SELECT pay_no, order_id, channel, amount, currency, status, COALESCE(gateway_txn, '') AS gateway_txn, created_at, paid_at
		FROM `+gene.Sibling(sh, "payments")+` WHERE pay_no = ?`+s.forUpdate(lock), payNo)
	if errors.Is(err, sql.ErrNoRows) {
		return Payment{}, fmt.Errorf("%w: payment %d", ErrNotFound, payNo)
	}
	if err != nil {
		return Payment{}, fmt.Errorf("order: read payment %d: %w", payNo, err)
	}
	return p, nil
}

// Callback is what a payment gateway reports about one payment attempt.
type Callback struct {
	PayNo      int64     `json:"pay_no"`      // our payment number
	GatewayTxn string    `json:"gateway_txn"` // the gateway's transaction id: the idempotency key
	Amount     int64     `json:"amount"`      // collected, in fen
	Currency   string    `json:"currency"`
	Success    bool      `json:"success"`
	PaidAt     time.Time `json:"paid_at,omitzero"` // optional: the callback's arrival when absent
}

// Outcome is what a callback did.
type Outcome string

// Callback outcomes.
const (
	OutcomePaid     Outcome = "paid"     // the order is now paid
	OutcomeRefund   Outcome = "refund"   // money arrived for an order that cannot take it: a refund was requested
	OutcomeFailed   Outcome = "failed"   // the gateway reports a failed attempt
	OutcomeRejected Outcome = "rejected" // refused (amount, currency, unknown payment) and recorded
)

// HandleCallback applies a gateway's report, idempotently by GatewayTxn: the
// first delivery decides and records the outcome, every repeat returns that
// outcome and writes nothing (one indexed read). A callback for an unknown
// payment is ErrCallback and writes nothing. Money that arrives for an
// order that is closed, already paid by another attempt, or never reserved
// becomes a refund request — never "paid". A report whose amount or currency
// differs from the attempt's is refused (ErrCallback), recorded, and
// changes nothing else.
//
// The payment attempt, its order, the callback record, the refund and the
// outbox event live in one database (they share the user's gene), so all of
// it is one transaction; the paid order's stock is confirmed after the
// commit (and by Sweep if the process dies first).
func (s *Service) HandleCallback(ctx context.Context, cb Callback) (Outcome, error) {
	ctx, call := s.obs.handleCallback.Start(ctx)
	out, err := s.handleCallback(ctx, cb)
	return out, call.End(err)
}

func (s *Service) handleCallback(ctx context.Context, cb Callback) (Outcome, error) {
	if cb.PayNo <= 0 || validUser(cb.GatewayTxn) != nil {
		s.obs.counted(ctx, cbMalformed)
		return "", fmt.Errorf("%w: callback for payment %d, gateway txn %q", ErrInvalid, cb.PayNo, cb.GatewayTxn)
	}
	sh := s.shardOfID(cb.PayNo)
	if out, ok, err := s.seen(ctx, sh.DB, sh, cb.GatewayTxn); err != nil || ok {
		if ok {
			s.obs.counted(ctx, cbReplayed)
		}
		return out, err
	}
	refundNo, err := s.newIDWithGene(ctx, s.genes.Gene(cb.PayNo)) // in case one is due: it lives beside the payment
	if err != nil {
		return "", err
	}
	var out Outcome
	var detail string
	var paid Order
	var replayed bool
	err = inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		if prev, ok, err := s.seen(ctx, tx, sh, cb.GatewayTxn); err != nil || ok {
			out, replayed = prev, ok
			return err
		}
		out, detail, paid = "", "", Order{}
		var err error
		out, detail, paid, err = s.apply(ctx, tx, sh, cb, refundNo)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO `+gene.Sibling(sh, "pay_callbacks")+` (gateway_txn, pay_no, outcome, detail, received_at) VALUES (?, ?, ?, ?, ?)`,
			cb.GatewayTxn, cb.PayNo, string(out), truncate(detail, 255), s.now())
		return err
	})
	if sqlutil.IsDuplicate(err) { // a concurrent delivery of the same txn won
		out, _, err = s.seen(ctx, sh.DB, sh, cb.GatewayTxn)
		if err == nil {
			s.obs.counted(ctx, cbReplayed)
		}
		return out, err
	}
	if err != nil {
		if r, ok := errors.AsType[*refusal](err); ok {
			s.obs.counted(ctx, r.reason)
		}
		return "", fmt.Errorf("order: callback %s: %w", cb.GatewayTxn, err)
	}
	s.countCallback(ctx, out, replayed)
	if out == OutcomePaid {
		if err := s.settleStock(ctx, &paid); err != nil {
			return out, err // paid stands; Sweep settles the stock
		}
	}
	if out == OutcomeRejected {
		return out, refused(cbMismatch, fmt.Errorf("%w: %s", ErrCallback, detail))
	}
	return out, nil
}

// countCallback counts a callback decided by this call (or found decided,
// replayed) and the refund it requested.
func (s *Service) countCallback(ctx context.Context, out Outcome, replayed bool) {
	switch {
	case replayed:
		s.obs.counted(ctx, cbReplayed)
	case out == OutcomePaid:
		s.obs.counted(ctx, cbPaid)
	case out == OutcomeRefund:
		s.obs.counted(ctx, cbRefund)
		s.obs.refunded(ctx, refundRequested, kindPayment)
	case out == OutcomeFailed:
		s.obs.counted(ctx, cbFailed)
	case out == OutcomeRejected:
		s.obs.counted(ctx, cbMismatch)
	}
}

// seen returns the recorded outcome of a callback already handled.
func (s *Service) seen(ctx context.Context, q querier, sh shard.Shard, txn string) (Outcome, bool, error) {
	var out string
	err := q.GetContext(ctx, &out, `SELECT outcome FROM `+gene.Sibling(sh, "pay_callbacks")+` WHERE gateway_txn = ?`, txn)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("order: read callback %s: %w", txn, err)
	}
	return Outcome(out), true, nil
}

// apply decides a first-seen callback inside tx.
func (s *Service) apply(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, cb Callback, refundNo int64) (Outcome, string, Order, error) {
	p, err := s.loadPayment(ctx, tx, sh, cb.PayNo, true)
	if errors.Is(err, ErrNotFound) { // nothing to attach a record to: refuse, write nothing
		return "", "", Order{}, refused(cbUnknownPayment, fmt.Errorf("%w: %w", ErrCallback, err))
	}
	if err != nil {
		return "", "", Order{}, err
	}
	if cb.Amount != p.Amount || cb.Currency != p.Currency {
		return OutcomeRejected, fmt.Sprintf("payment %d is %d %s, callback says %d %s", p.PayNo, p.Amount, p.Currency, cb.Amount, cb.Currency), Order{}, nil
	}
	if !cb.Success {
		_, err := tx.ExecContext(ctx, `UPDATE `+gene.Sibling(sh, "payments")+` SET status = ? WHERE pay_no = ? AND status = ?`, PaymentFailed, p.PayNo, PaymentCreated)
		return OutcomeFailed, "gateway reports failure", Order{}, err
	}
	if p.Status == PaymentSucceeded { // the same attempt collected twice (two gateway txns)
		return OutcomeRefund, "second collection of payment " + strconv.FormatInt(p.PayNo, 10),
			Order{}, s.requestRefund(ctx, tx, sh, refundNo, p, cb.GatewayTxn, "duplicate_collection")
	}
	paidAt := ms(cb.PaidAt)
	if cb.PaidAt.IsZero() {
		paidAt = s.now()
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+gene.Sibling(sh, "payments")+` SET status = ?, gateway_txn = ?, paid_at = ? WHERE pay_no = ?`,
		PaymentSucceeded, cb.GatewayTxn, paidAt, p.PayNo); err != nil {
		return "", "", Order{}, err
	}
	o, err := s.load(ctx, tx, sh, p.OrderID, true)
	if err != nil {
		return "", "", Order{}, err
	}
	if o.Status == Pending && o.stock == stockReserved {
		o.PayNo, o.PaidAt = p.PayNo, instant(paidAt)
		return OutcomePaid, "", o, s.update(ctx, tx, &o, Paid, `, pay_no = ?, paid_at = ?`, p.PayNo, paidAt)
	}
	reason := "late_payment" // closed, or never reserved
	if o.PayNo != 0 {
		reason = "paid_twice" // another attempt paid it
	}
	return OutcomeRefund, fmt.Sprintf("order %d is %s (reserved %v)", o.ID, o.Status, o.Reserved),
		Order{}, s.requestRefund(ctx, tx, sh, refundNo, p, cb.GatewayTxn, reason)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
