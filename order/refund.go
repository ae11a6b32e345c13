package order

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// Refund is money owed back to a payer: part or all of a paid order, or the
// whole of a payment that arrived for an order that could not take it.
type Refund struct {
	RefundNo  int64  `db:"refund_no"`
	OrderID   int64  `db:"order_id"`
	PayNo     int64  `db:"pay_no"`
	Amount    int64  `db:"amount"`
	Reason    string `db:"reason"`
	Status    string `db:"status"` // requested, done
	CreatedAt int64  `db:"created_at"`
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

// RequestRefund asks to pay amount of a paid order back (partial refunds
// add up to at most the paid amount). It moves the order Paid → Refunding
// and returns the refund to pay out. requestID (1..64 printable ASCII) makes
// it idempotent: a repeat returns the first refund.
func (s *Service) RequestRefund(ctx context.Context, orderID, amount int64, reason, requestID string) (Refund, error) {
	if amount < 1 || reason == "" || len(reason) > 32 || validUser(requestID) != nil {
		return Refund{}, fmt.Errorf("%w: refund of %d, reason %q, request %q", ErrInvalid, amount, reason, requestID)
	}
	if orderID <= 0 {
		return Refund{}, fmt.Errorf("%w: order id %d", ErrInvalid, orderID)
	}
	sh := s.shardOfID(orderID)
	dedupe := dedupeKey("req", strconv.FormatInt(orderID, 10), requestID)
	if r, err := s.refundBy(ctx, sh.DB, sh, "dedupe", dedupe); err == nil || !errors.Is(err, ErrNotFound) {
		return r, err
	}
	refundNo, err := s.newIDWithGene(ctx, s.genes.Gene(orderID))
	if err != nil {
		return Refund{}, err
	}
	r := Refund{RefundNo: refundNo, OrderID: orderID, Amount: amount, Reason: reason, Status: RefundRequested}
	err = inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		o, err := s.load(ctx, tx, sh, orderID, true)
		if err != nil {
			return err
		}
		if o.Status != Paid {
			return illegal(orderID, o.Status, Refunding)
		}
		if amount > o.Amount-o.Refunded {
			return fmt.Errorf("%w: %d asked, %d of %d left", ErrRefundTooLarge, amount, o.Amount-o.Refunded, o.Amount)
		}
		r.PayNo = o.PayNo
		if err := s.update(ctx, tx, &o, Refunding, ""); err != nil {
			return err
		}
		return s.insertRefund(ctx, tx, sh, r, dedupe)
	})
	if sqlutil.IsDuplicate(err) {
		return s.refundBy(ctx, sh.DB, sh, "dedupe", dedupe)
	}
	if err != nil {
		return Refund{}, err
	}
	return s.refundBy(ctx, sh.DB, sh, "refund_no", refundNo)
}

// RefundPaid records that the gateway paid refund refundNo back. For a
// refund of a paid order, the order's refunded total grows and the order
// goes Refunding → Refunded when all of it went back, else back to Paid. A
// refund marked done before is a no-op.
func (s *Service) RefundPaid(ctx context.Context, refundNo int64) (Refund, error) {
	if refundNo <= 0 {
		return Refund{}, fmt.Errorf("%w: refund %d", ErrInvalid, refundNo)
	}
	sh := s.shardOfID(refundNo)
	err := inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		r, err := s.refundBy(ctx, tx, sh, "refund_no", refundNo)
		if err != nil || r.Status == RefundDone {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+gene.Sibling(sh, "refunds")+` SET status = ? WHERE refund_no = ? AND status = ?`, RefundDone, refundNo, RefundRequested); err != nil {
			return err
		}
		o, err := s.load(ctx, tx, sh, r.OrderID, true)
		if err != nil {
			return err
		}
		if o.Status != Refunding || o.PayNo != r.PayNo {
			return nil // a refund of money the order never took (late or second payment)
		}
		refunded := o.Refunded + r.Amount
		to := Paid
		if refunded >= o.Amount {
			to = Refunded
		}
		return s.update(ctx, tx, &o, to, `, refunded = ?`, refunded)
	})
	if err != nil {
		return Refund{}, err
	}
	return s.refundBy(ctx, sh.DB, sh, "refund_no", refundNo)
}

// Refunds lists the refunds of an order.
func (s *Service) Refunds(ctx context.Context, orderID int64) ([]Refund, error) {
	sh := s.shardOfID(orderID)
	var rs []Refund
	err := sh.DB.SelectContext(ctx, &rs, `SELECT refund_no, order_id, pay_no, amount, reason, status, created_at FROM `+gene.Sibling(sh, "refunds")+` WHERE order_id = ? ORDER BY refund_no`, orderID)
	if err != nil {
		return nil, fmt.Errorf("order: refunds of %d: %w", orderID, err)
	}
	return rs, nil
}

func (s *Service) refundBy(ctx context.Context, q querier, sh shard.Shard, column string, v any) (Refund, error) {
	var r Refund
	err := q.GetContext(ctx, &r, `SELECT refund_no, order_id, pay_no, amount, reason, status, created_at FROM `+gene.Sibling(sh, "refunds")+` WHERE `+column+` = ?`, v)
	if errors.Is(err, sql.ErrNoRows) {
		return Refund{}, fmt.Errorf("%w: refund %s %v", ErrNotFound, column, v)
	}
	if err != nil {
		return Refund{}, fmt.Errorf("order: read refund: %w", err)
	}
	return r, nil
}
