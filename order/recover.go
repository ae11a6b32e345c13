package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/shard"
)

// Channel is the part of a payment channel's API that recovery needs: what
// the channel knows of one payment attempt. found is false when the channel
// has no collection for it (yet).
type Channel interface {
	Query(ctx context.Context, payNo int64) (cb Callback, found bool, err error)
}

// RecoverLookback is how long after an order closed RecoverPayments still
// asks the channel about its unpaid attempts: a gateway's callback retry
// schedule (24 h 4 min for WeChat Pay).
const RecoverLookback = 24*time.Hour + 4*time.Minute

// RecoverPayments is the answer to lost callbacks: it asks ch about every
// payment attempt still waiting for its callback whose order closes within
// `within`, is past its deadline, or closed unpaid within the last
// RecoverLookback — a buyer can still pay an attempt at the channel after
// the order closed, and that money must become a refund even if its callback
// is lost — and applies what the channel says through HandleCallback
// (idempotent, so a callback arriving at the same time changes nothing
// twice). It returns how many attempts it resolved. Run it every few
// minutes, and once more before closing a batch of orders; older closed
// orders are left to Reconcile.
func (s *Service) RecoverPayments(ctx context.Context, ch Channel, within time.Duration, batch int) (int, error) {
	ctx, call := s.obs.recoverPayments.Start(ctx)
	n, err := s.recoverPayments(ctx, ch, within, batch)
	return n, call.End(err)
}

func (s *Service) recoverPayments(ctx context.Context, ch Channel, within time.Duration, batch int) (int, error) {
	if batch < 1 || within < 0 {
		return 0, fmt.Errorf("%w: batch %d, within %v", ErrInvalid, batch, within)
	}
	horizon := ms(s.cfg.Now().Add(within))
	resolved := 0
	parts, err := shard.Gather(ctx, s.orders.All(), 16, func(ctx context.Context, sh shard.Shard) ([]Payment, error) {
		var ps []Payment
		err := sh.DB.SelectContext(ctx, &ps, `SELECT p.pay_no, p.order_id, p.channel, p.amount, p.currency, p.status, COALESCE(p.gateway_txn, '') AS gateway_txn, p.created_at, p.paid_at
			FROM `+gene.Sibling(sh, "payments")+` p JOIN `+sh.Table+` o ON o.id = p.order_id
			WHERE p.status = ? AND (o.status = ? AND o.pay_deadline <= ? OR o.status = ? AND o.updated_at >= ?)
			ORDER BY p.pay_no LIMIT ?`, PaymentCreated, string(Pending), horizon, string(Closed), ms(s.cfg.Now().Add(-RecoverLookback)), batch)
		return ps, err
	}, func(a, b Payment) bool { return a.PayNo < b.PayNo }, 0)
	if err != nil {
		return 0, fmt.Errorf("order: recover payments: %w", err)
	}
	for _, p := range parts {
		cb, found, err := ch.Query(ctx, p.PayNo)
		if err != nil {
			return resolved, fmt.Errorf("order: query channel for %d: %w", p.PayNo, err)
		}
		if !found {
			continue
		}
		if _, err := s.handleCallback(ctx, cb); err != nil && !errors.Is(err, ErrCallback) {
			return resolved, err
		}
		resolved++
	}
	return resolved, nil
}
