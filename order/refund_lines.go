package order

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

// RefundLines asks to pay units of a paid order's lines back and to put
// those units back in stock, and returns the refund to pay out: its Amount
// is the sum over lines of Qty × the line's price. An order's amount is
// exactly the sum of its lines' (there are no order-level discounts or
// shipping fees), so no pro-rating is involved and refunding every unit
// refunds every fen.
//
// Per line, the units refunded over all calls never exceed those bought: a
// refund takes the line's unshipped units first (they will not ship), and
// beyond them it is a return of shipped units, to be requested once the
// goods are back on the shelf. Either way the units return to the SKU's
// stock (sold → available), once per refund and SKU — after the commit, in
// the SKU's inventory database behind a barrier row, and by Sweep if the
// process dies first. Goods that come back unsellable are refunded by amount
// (RequestRefund, before shipping) or outside this package: a line refund
// always restocks.
//
// The money of all refunds of the order, by amount and by line, requested or
// paid back, never exceeds what was paid: a line refund above what is left
// is ErrRefundTooLarge (an amount refund earlier takes from the same money,
// and restocks nothing). A refund that leaves nothing to ship moves a
// PartiallyShipped order to Shipped; refunds reaching the whole paid amount
// move the order to Refunding, and RefundPaid to Refunded.
//
// requestID (1..64 printable ASCII, shared with RequestRefund: one id names
// one refund of the order) makes it idempotent: a repeat, concurrent or
// after a lost reply, returns the first refund (finishing its restock) and
// changes nothing; the same id with other lines, or naming a refund by
// amount, is ErrInvalid. An order that is not paid (Pending, Closed,
// Refunded) is ErrIllegalTransition; lines the order does not have,
// repeated, or of quantity 0 are ErrInvalid; more units than a line has
// left unrefunded is ErrQuantity — and each changes nothing. reason is
// 1..32 bytes.
//
// If restocking fails after the refund committed, the refund is returned
// with the error: it stands, and a repeat of the request or Sweep finishes
// the restock.
func (s *Service) RefundLines(ctx context.Context, orderID int64, lines []Line, reason, requestID string) (Refund, error) {
	ctx, call := s.obs.refundLines.Start(ctx)
	r, fresh, err := s.refundLines(ctx, orderID, lines, reason, requestID)
	s.countRefund(ctx, fresh, kindLines, err)
	return r, call.End(err)
}

// refundLines is RefundLines; fresh reports a refund recorded by this call
// (not a repeat's), which stands even if its restock then failed.
func (s *Service) refundLines(ctx context.Context, orderID int64, lines []Line, reason, requestID string) (_ Refund, fresh bool, _ error) {
	if orderID <= 0 {
		return Refund{}, false, fmt.Errorf("%w: order id %d", ErrInvalid, orderID)
	}
	if reason == "" || len(reason) > 32 || validUser(requestID) != nil {
		return Refund{}, false, fmt.Errorf("%w: line refund, reason %q, request %q", ErrInvalid, reason, requestID)
	}
	if err := validLines(lines); err != nil {
		return Refund{}, false, err
	}
	sh := s.shardOfID(orderID)
	dedupe := dedupeKey(refundRequest, strconv.FormatInt(orderID, 10), requestID)
	if r, err := s.refundBy(ctx, sh.DB, sh, "dedupe", dedupe); err == nil || !errors.Is(err, ErrNotFound) {
		r, err := s.repeatedLineRefund(ctx, r, err, lines, requestID)
		return r, false, err
	}
	refundNo, err := s.newIDWithGene(ctx, s.genes.Gene(orderID))
	if err != nil {
		return Refund{}, false, err
	}
	var o Order
	var wasShipped bool
	var twin *Refund
	err = inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		var err error
		twin = nil
		if o, err = s.load(ctx, tx, sh, orderID, true); err != nil {
			return err
		}
		if twin, err = s.twinRefund(ctx, tx, sh, dedupe); twin != nil || err != nil {
			return err
		}
		switch o.Status {
		case Paid, PartiallyShipped, Shipped, Completed, Refunding:
		default:
			return fmt.Errorf("%w: order %d is %s: only a paid order refunds lines", ErrIllegalTransition, orderID, o.Status)
		}
		wasShipped = o.Status == Shipped
		r := Refund{RefundNo: refundNo, OrderID: orderID, PayNo: o.PayNo, Reason: reason}
		for _, l := range lines {
			i, err := itemOf(&o, l.SKU)
			if err != nil {
				return err
			}
			it := &o.Items[i]
			if left := it.Qty - it.Refunded; l.Qty > left {
				return fmt.Errorf("%w: %d of %s asked, %d left to refund in order %d", ErrQuantity, l.Qty, l.SKU, left, orderID)
			}
			it.Refunded += l.Qty
			r.Amount += l.Qty * it.Price
			r.Lines = append(r.Lines, RefundLine{SKU: l.SKU, Qty: l.Qty, Amount: l.Qty * it.Price})
		}
		due, err := s.refundsDue(ctx, tx, sh, orderID)
		if err != nil {
			return err
		}
		if left := o.Amount - due.requested; r.Amount > left {
			return fmt.Errorf("%w: lines worth %d asked, %d of %d left", ErrRefundTooLarge, r.Amount, left, o.Amount)
		}
		to, set, args := o.Status, "", []any(nil)
		left, shipped := toShip(o.Items)
		switch {
		case due.requested+r.Amount >= o.Amount:
			to = Refunding
		case left == 0 && shipped > 0 && (o.Status == Paid || o.Status == PartiallyShipped):
			to, set, args = Shipped, `, shipped_at = ?`, []any{s.now()}
			o.ShippedAt = instant(s.now())
		}
		if err := s.save(ctx, tx, &o, to, set, args...); err != nil {
			return err
		}
		if err := s.insertRefund(ctx, tx, sh, r, dedupe); err != nil {
			return err
		}
		return s.insertRefundLines(ctx, tx, sh, r)
	})
	if sqlutil.IsDuplicate(err) { // a concurrent twin of the request won
		r, err := s.refundBy(ctx, sh.DB, sh, "dedupe", dedupe)
		r, err = s.repeatedLineRefund(ctx, r, err, lines, requestID)
		return r, false, err
	}
	if err != nil {
		return Refund{}, false, err
	}
	if twin != nil {
		r, err := s.repeatedLineRefund(ctx, *twin, nil, lines, requestID)
		return r, false, err
	}
	if !wasShipped && o.Status == Shipped {
		s.schedule(ctx, queueComplete, orderID, o.ShippedAt.Add(s.cfg.AutoComplete))
	}
	r, err := s.refundBy(ctx, sh.DB, sh, "refund_no", refundNo)
	if err == nil {
		r, err = s.restock(ctx, r)
	}
	return r, true, err
}

// twinRefund returns, inside tx and after the order's row lock, the refund
// a concurrent twin of the request committed while this one waited for the
// lock — so that the repeat answers with it instead of being judged anew
// against the order the twin changed (and refused for want of units).
func (s *Service) twinRefund(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, dedupe string) (*Refund, error) {
	r, err := s.refundBy(ctx, tx, sh, "dedupe", dedupe)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// repeatedLineRefund answers a repeat of a line refund request: the first
// refund, restocked, if the repeat asks for the same lines.
func (s *Service) repeatedLineRefund(ctx context.Context, r Refund, err error, lines []Line, requestID string) (Refund, error) {
	if err != nil {
		return Refund{}, err
	}
	asked := make([]Line, len(r.Lines))
	for i, l := range r.Lines {
		asked[i] = Line{SKU: l.SKU, Qty: l.Qty}
	}
	if r.Lines == nil || !sameLines(asked, lines) {
		return Refund{}, fmt.Errorf("%w: refund request %q of order %d made another refund (%d)", ErrInvalid, requestID, r.OrderID, r.RefundNo)
	}
	return s.restock(ctx, r)
}

func (s *Service) insertRefundLines(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, r Refund) error {
	var q strings.Builder
	q.WriteString(`INSERT INTO ` + gene.Sibling(sh, "refund_lines") + ` (refund_no, sku, order_id, qty, amount, restocked) VALUES `)
	args := make([]any, 0, 5*len(r.Lines))
	for i, l := range r.Lines {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString(`(?, ?, ?, ?, ?, 0)`)
		args = append(args, r.RefundNo, l.SKU, r.OrderID, l.Qty, l.Amount)
	}
	_, err := tx.ExecContext(ctx, q.String(), args...)
	return err
}

// restock puts the units of r's lines not restocked yet back in stock, each
// in its SKU's inventory database: first the order's reservation is
// confirmed (a no-op unless the payment's own settling is still to come),
// then the return moves sold → available behind its barrier row, then the
// refund line is marked. Every step is idempotent, so a repeat of the
// request and Sweep may run it again after a crash.
func (s *Service) restock(ctx context.Context, r Refund) (Refund, error) {
	sh := s.shardOfID(r.RefundNo)
	for i, l := range r.Lines {
		if l.Restocked {
			continue
		}
		if err := s.settle(ctx, r.OrderID, l.SKU, barrierConfirmed); err != nil {
			return r, fmt.Errorf("order: restock refund %d: %w", r.RefundNo, err)
		}
		if err := s.returnStock(ctx, r.RefundNo, r.OrderID, l.SKU, l.Qty); err != nil {
			return r, fmt.Errorf("order: restock refund %d: %w", r.RefundNo, err)
		}
		if _, err := sh.DB.ExecContext(ctx, `UPDATE `+gene.Sibling(sh, "refund_lines")+` SET restocked = 1 WHERE refund_no = ? AND sku = ?`, r.RefundNo, l.SKU); err != nil {
			return r, fmt.Errorf("order: mark refund %d restocked: %w", r.RefundNo, err)
		}
		r.Lines[i].Restocked = true
	}
	return r, nil
}

// refundLinesOf reads the lines of refunds, by refund number: of one refund,
// or (refundNo 0) of every refund of orderID.
func (s *Service) refundLinesOf(ctx context.Context, q querier, sh shard.Shard, orderID, refundNo int64) (map[int64][]RefundLine, error) {
	var rows []struct {
		RefundNo int64 `db:"refund_no"`
		RefundLine
	}
	column, v := "order_id", orderID
	if refundNo != 0 {
		column, v = "refund_no", refundNo
	}
	if err := q.SelectContext(ctx, &rows, `SELECT refund_no, sku, qty, amount, restocked FROM `+gene.Sibling(sh, "refund_lines")+` WHERE `+column+` = ? ORDER BY refund_no, sku`, v); err != nil {
		return nil, fmt.Errorf("order: refund lines: %w", err)
	}
	out := map[int64][]RefundLine{}
	for _, r := range rows {
		out[r.RefundNo] = append(out[r.RefundNo], r.RefundLine)
	}
	return out, nil
}

// restockDue finishes, on every order table, at most batch line refunds
// whose stock a crash left unreturned, oldest first, and returns how many
// it finished. A refund that fails is passed over (its error joined to the
// result) so that one return that cannot succeed does not hold back the
// rest, nor, through Sweep, the other shards.
func (s *Service) restockDue(ctx context.Context, sh shard.Shard, batch int) (int, error) {
	var refunds []int64
	if err := sh.DB.SelectContext(ctx, &refunds, `SELECT DISTINCT refund_no FROM `+gene.Sibling(sh, "refund_lines")+` WHERE restocked = 0 ORDER BY refund_no LIMIT ?`, batch); err != nil {
		return 0, fmt.Errorf("order: sweep %s: %w", sh.Table, err)
	}
	done := 0
	var errs []error
	for _, no := range refunds {
		r, err := s.refundBy(ctx, sh.DB, sh, "refund_no", no)
		if err == nil {
			_, err = s.restock(ctx, r)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("order: restock refund %d: %w", no, err))
			continue
		}
		done++
	}
	return done, errors.Join(errs...)
}
