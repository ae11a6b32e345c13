package order

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// Refund is money owed back to a payer: an amount of a paid order
// (RequestRefund), units of its lines (RefundLines), or the whole of a
// payment that arrived for an order that could not take it.
type Refund struct {
	RefundNo  int64        `db:"refund_no"`
	OrderID   int64        `db:"order_id"`
	PayNo     int64        `db:"pay_no"`
	Amount    int64        `db:"amount"`
	Reason    string       `db:"reason"`
	Status    string       `db:"status"` // requested, done
	CreatedAt int64        `db:"created_at"`
	Lines     []RefundLine `db:"-"` // a line refund's lines; nil for a refund by amount
}

// RefundLine is one line of a line refund: units of a SKU, their money (Qty
// × the line's price) and whether they are back in stock yet.
type RefundLine struct {
	SKU       string `db:"sku" json:"sku"`
	Qty       int64  `db:"qty" json:"qty"`
	Amount    int64  `db:"amount" json:"amount"`
	Restocked bool   `db:"restocked" json:"restocked"`
}

// Refund statuses.
const (
	RefundRequested = "requested"
	RefundDone      = "done"
)

// requestRefund records, inside tx, that payment p must go back in full
// (once per payment: a second request for it is a no-op) and emits the
// event the refunding job consumes.
func (s *Service) requestRefund(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, refundNo int64, p Payment, txn, reason string) error {
	return s.insertRefund(ctx, tx, sh, Refund{RefundNo: refundNo, OrderID: p.OrderID, PayNo: p.PayNo, Amount: p.Amount, Reason: reason},
		dedupeKey("pay", strconv.FormatInt(p.PayNo, 10), txn))
}

func (s *Service) insertRefund(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, r Refund, dedupe string) error {
	now := s.now()
	_, err := tx.ExecContext(ctx, `INSERT INTO `+gene.Sibling(sh, "refunds")+` (refund_no, order_id, pay_no, amount, reason, dedupe, status, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, r.RefundNo, r.OrderID, r.PayNo, r.Amount, r.Reason, dedupe, RefundRequested, now)
	if err != nil {
		return err
	}
	return s.emit(ctx, tx, Event{ID: "r" + strconv.FormatInt(r.RefundNo, 10), Kind: EventRefundRequested, OrderID: r.OrderID,
		Amount: r.Amount, PayNo: r.PayNo, RefundNo: r.RefundNo, Reason: r.Reason, At: now})
}

// RequestRefund asks to pay amount of a paid order back, before anything
// shipped (partial refunds, by amount and by line, add up to at most the
// paid amount). It moves the order Paid → Refunding and returns the refund
// to pay out; it returns no stock (RefundLines does). requestID (1..64
// printable ASCII) makes it idempotent: a repeat returns the first refund.
// Request ids are shared with RefundLines: one id names one refund of the
// order, of either kind, and a repeat that asks for another amount, or
// names a line refund's id, is ErrInvalid.
func (s *Service) RequestRefund(ctx context.Context, orderID, amount int64, reason, requestID string) (Refund, error) {
	ctx, call := s.obs.requestRefund.Start(ctx)
	r, fresh, err := s.amountRefund(ctx, orderID, amount, reason, requestID)
	s.countRefund(ctx, fresh, kindAmount, err)
	return r, call.End(err)
}

// countRefund counts a refund request: fresh, one recorded by this call
// (of kind); otherwise, when it succeeded, a repeat.
func (s *Service) countRefund(ctx context.Context, fresh bool, kind string, err error) {
	switch {
	case fresh:
		s.obs.refunded(ctx, refundRequested, kind)
	case err == nil:
		s.obs.refunded(ctx, refundReplayed, "")
	}
}

// amountRefund is RequestRefund; fresh reports a refund recorded by this
// call (not a repeat's).
func (s *Service) amountRefund(ctx context.Context, orderID, amount int64, reason, requestID string) (_ Refund, fresh bool, _ error) {
	if amount < 1 || reason == "" || len(reason) > 32 || validUser(requestID) != nil {
		return Refund{}, false, fmt.Errorf("%w: refund of %d, reason %q, request %q", ErrInvalid, amount, reason, requestID)
	}
	if orderID <= 0 {
		return Refund{}, false, fmt.Errorf("%w: order id %d", ErrInvalid, orderID)
	}
	sh := s.shardOfID(orderID)
	dedupe := dedupeKey(refundRequest, strconv.FormatInt(orderID, 10), requestID)
	if r, err := s.refundBy(ctx, sh.DB, sh, "dedupe", dedupe); err == nil || !errors.Is(err, ErrNotFound) {
		r, err := repeatedRefund(r, err, amount, requestID)
		return r, false, err
	}
	refundNo, err := s.newIDWithGene(ctx, s.genes.Gene(orderID))
	if err != nil {
		return Refund{}, false, err
	}
	r := Refund{RefundNo: refundNo, OrderID: orderID, Amount: amount, Reason: reason, Status: RefundRequested}
	var twin *Refund
	err = inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		o, err := s.load(ctx, tx, sh, orderID, true)
		if err != nil {
			return err
		}
		if twin, err = s.twinRefund(ctx, tx, sh, dedupe); twin != nil || err != nil {
			return err
		}
		if o.Status != Paid {
			return illegal(orderID, o.Status, Refunding)
		}
		due, err := s.refundsDue(ctx, tx, sh, orderID)
		if err != nil {
			return err
		}
		if left := o.Amount - due.requested; amount > left {
			return fmt.Errorf("%w: %d asked, %d of %d left", ErrRefundTooLarge, amount, left, o.Amount)
		}
		r.PayNo = o.PayNo
		if err := s.update(ctx, tx, &o, Refunding, ""); err != nil {
			return err
		}
		return s.insertRefund(ctx, tx, sh, r, dedupe)
	})
	if sqlutil.IsDuplicate(err) {
		r, err := s.refundBy(ctx, sh.DB, sh, "dedupe", dedupe)
		r, err = repeatedRefund(r, err, amount, requestID)
		return r, false, err
	}
	if err != nil {
		return Refund{}, false, err
	}
	if twin != nil { // a concurrent twin of the request won (it made the order Refunding)
		r, err := repeatedRefund(*twin, nil, amount, requestID)
		return r, false, err
	}
	r, err = s.refundBy(ctx, sh.DB, sh, "refund_no", refundNo)
	return r, true, err
}

// repeatedRefund answers a repeat of an amount refund request: the first
// refund, if it was one of the same amount; a line refund or another amount
// under the same request id is ErrInvalid (the id named another refund).
func repeatedRefund(r Refund, err error, amount int64, requestID string) (Refund, error) {
	if err != nil {
		return Refund{}, err
	}
	if r.Lines != nil || r.Amount != amount {
		return Refund{}, fmt.Errorf("%w: refund request %q of order %d made another refund (%d: %d, %d lines), not one of %d",
			ErrInvalid, requestID, r.OrderID, r.RefundNo, r.Amount, len(r.Lines), amount)
	}
	return r, nil
}

// RefundPaid records that the gateway paid refund refundNo back. For a
// refund of a paid order (by amount or by line), the order's refunded total
// grows; the order becomes Refunded when all of its paid amount went back,
// goes from Refunding back to Paid when a partial amount refund was paid and
// no other refund of it is due, and otherwise keeps its status. A refund
// marked done before is a no-op.
func (s *Service) RefundPaid(ctx context.Context, refundNo int64) (Refund, error) {
	ctx, call := s.obs.refundPaid.Start(ctx)
	r, err := s.refundPaid(ctx, refundNo)
	return r, call.End(err)
}

func (s *Service) refundPaid(ctx context.Context, refundNo int64) (Refund, error) {
	if refundNo <= 0 {
		return Refund{}, fmt.Errorf("%w: refund %d", ErrInvalid, refundNo)
	}
	sh := s.shardOfID(refundNo)
	var marked bool // by this call: not done before, nor by a concurrent twin
	err := inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		marked = false
		r, err := s.refundBy(ctx, tx, sh, "refund_no", refundNo)
		if err != nil || r.Status == RefundDone {
			return err
		}
		// The order's row lock first: every refund of the order is decided
		// under it, so its sums below are the order's last word.
		o, err := s.load(ctx, tx, sh, r.OrderID, true)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE `+gene.Sibling(sh, "refunds")+` SET status = ? WHERE refund_no = ? AND status = ?`, RefundDone, refundNo, RefundRequested)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // a concurrent twin marked it done first, and counted it
		}
		marked = true
		own, err := s.ownRefund(ctx, tx, sh, refundNo)
		if err != nil || !own || o.PayNo != r.PayNo {
			return err // a refund of money the order never took (late or second payment)
		}
		due, err := s.refundsDue(ctx, tx, sh, o.ID)
		if err != nil {
			return err
		}
		refunded := o.Refunded + r.Amount
		to := o.Status
		switch {
		case refunded >= o.Amount:
			to = Refunded
		case o.Status == Refunding && due.requested-due.done == 0 && due.requested < o.Amount:
			to = Paid
		}
		return s.save(ctx, tx, &o, to, `, refunded = ?`, refunded)
	})
	if err != nil {
		return Refund{}, err
	}
	if marked {
		s.obs.refunded(ctx, refundPaidBack, "")
	} else {
		s.obs.refunded(ctx, refundReplayed, "")
	}
	return s.refundBy(ctx, sh.DB, sh, "refund_no", refundNo)
}

// Refunds of an order itself (RequestRefund, RefundLines) have a dedupe key
// of kind refundRequest; those of a payment it could not take, of kind
// "pay".
const refundRequest = "req"

// due is what refunds of an order's own payment add up to: requested (in
// any status) and done.
type due struct{ requested, done int64 }

// refundsDue sums the refunds of order id's own payment, inside tx (after
// the order's row lock).
func (s *Service) refundsDue(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, id int64) (due, error) {
	var d struct {
		Requested int64 `db:"requested"`
		Done      int64 `db:"done"`
	}
	err := tx.GetContext(ctx, &d, `SELECT COALESCE(SUM(amount), 0) AS requested, COALESCE(SUM(CASE WHEN status = ? THEN amount ELSE 0 END), 0) AS done
		FROM `+gene.Sibling(sh, "refunds")+` WHERE order_id = ? AND dedupe LIKE ?`, RefundDone, id, refundRequest+":%")
	if err != nil {
		return due{}, fmt.Errorf("order: refunds of %d: %w", id, err)
	}
	return due{requested: d.Requested, done: d.Done}, nil
}

// ownRefund reports whether refund refundNo is one of its order's own
// (requested for the order), not of a payment the order could not take.
func (s *Service) ownRefund(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, refundNo int64) (bool, error) {
	var dedupe string
	if err := tx.GetContext(ctx, &dedupe, `SELECT dedupe FROM `+gene.Sibling(sh, "refunds")+` WHERE refund_no = ?`, refundNo); err != nil {
		return false, fmt.Errorf("order: read refund %d: %w", refundNo, err)
	}
	return strings.HasPrefix(dedupe, refundRequest+":"), nil
}

// Refunds lists the refunds of an order, with their lines.
func (s *Service) Refunds(ctx context.Context, orderID int64) ([]Refund, error) {
	ctx, call := s.obs.refunds.Start(ctx)
	rs, err := s.refundsOf(ctx, orderID)
	return rs, call.End(err)
}

func (s *Service) refundsOf(ctx context.Context, orderID int64) ([]Refund, error) {
	if orderID <= 0 {
		return nil, fmt.Errorf("%w: order id %d", ErrInvalid, orderID)
	}
	sh := s.shardOfID(orderID)
	var rs []Refund
	err := sh.DB.SelectContext(ctx, &rs, `SELECT `+refundColumns+` FROM `+gene.Sibling(sh, "refunds")+` WHERE order_id = ? ORDER BY refund_no`, orderID)
	if err != nil {
		return nil, fmt.Errorf("order: refunds of %d: %w", orderID, err)
	}
	lines, err := s.refundLinesOf(ctx, sh.DB, sh, orderID, 0)
	if err != nil {
		return nil, err
	}
	for i := range rs {
		rs[i].Lines = lines[rs[i].RefundNo]
	}
	return rs, nil
}

// RefundOf returns refund refundNo with its lines: what the consumer of an
// EventRefundRequested reads to learn a line refund's units.
func (s *Service) RefundOf(ctx context.Context, refundNo int64) (Refund, error) {
	ctx, call := s.obs.refundOf.Start(ctx)
	r, err := s.refundOf(ctx, refundNo)
	return r, call.End(err)
}

func (s *Service) refundOf(ctx context.Context, refundNo int64) (Refund, error) {
	if refundNo <= 0 {
		return Refund{}, fmt.Errorf("%w: refund %d", ErrInvalid, refundNo)
	}
	sh := s.shardOfID(refundNo)
	return s.refundBy(ctx, sh.DB, sh, "refund_no", refundNo)
}

const refundColumns = `refund_no, order_id, pay_no, amount, reason, status, created_at`

func (s *Service) refundBy(ctx context.Context, q querier, sh shard.Shard, column string, v any) (Refund, error) {
	var r Refund
	err := q.GetContext(ctx, &r, `SELECT `+refundColumns+` FROM `+gene.Sibling(sh, "refunds")+` WHERE `+column+` = ?`, v)
	if errors.Is(err, sql.ErrNoRows) {
		return Refund{}, fmt.Errorf("%w: refund %s %v", ErrNotFound, column, v)
	}
	if err != nil {
		return Refund{}, fmt.Errorf("order: read refund: %w", err)
	}
	lines, err := s.refundLinesOf(ctx, q, sh, 0, r.RefundNo)
	if err != nil {
		return Refund{}, err
	}
	r.Lines = lines[r.RefundNo]
	return r, nil
}
