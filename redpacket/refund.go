package redpacket

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/gene"
)

// Refund returns what is left of an expired packet to its sender, once:
// total − Σ claims, computed from the SQL ledger, behind a unique refund
// row, with the sender's credit and the packet's "refunded" mark in the
// same transaction. It returns the amount refunded (0 for a packet fully
// claimed). Before that it checks a fence, not a clock: every claim Redis
// accepted must be in SQL (Redis' claim count equals the ledger's), else
// ErrFence — the relay or the consumer is behind. A packet whose Redis
// state is gone is refunded from the ledger alone once LostStateGrace has
// passed after its expiry. A refunded packet returns its refund again.
func (s *Service) Refund(ctx context.Context, packet int64) (int64, error) {
	p, err := s.Get(ctx, packet)
	if err != nil {
		return 0, err
	}
	if p.Status == StatusRefunded {
		return p.Refund, nil
	}
	now := s.cfg.Now()
	expires := time.UnixMilli(p.ExpiresAt)
	if now.Before(expires) {
		return 0, fmt.Errorf("%w: packet %d expires at %v", ErrNotExpired, packet, expires)
	}
	state, list := s.packetKeys(packet)
	claimed, err := s.rdb.HGet(ctx, state, "claimed").Int()
	switch {
	case errors.Is(err, redis.Nil):
		if now.Before(expires.Add(s.cfg.LostStateGrace)) {
			return 0, fmt.Errorf("%w: packet %d has no Redis state; refunding from SQL after %v", ErrFence, packet, expires.Add(s.cfg.LostStateGrace))
		}
	case err != nil:
		return 0, fmt.Errorf("redpacket: refund fence: %w", err)
	case claimed > p.ClaimedCount:
		return 0, fmt.Errorf("%w: Redis accepted %d claims of packet %d, SQL holds %d", ErrFence, claimed, packet, p.ClaimedCount)
	}
	sh := s.shardOfPacket(packet)
	var refund int64
	err = inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		var sum int64
		if err := tx.GetContext(ctx, &sum, `SELECT COALESCE(SUM(amount), 0) FROM `+gene.Sibling(sh, "rp_claims")+` WHERE packet_id = ?`, packet); err != nil {
			return err
		}
		refund = p.Total - sum
		res, err := tx.ExecContext(ctx, `UPDATE `+sh.Table+` SET status = ?, refund = ? WHERE id = ? AND status = ?`, StatusRefunded, refund, packet, StatusOpen)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errRefundedMeanwhile
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+gene.Sibling(sh, "rp_refunds")+` (packet_id, amount, refunded_at) VALUES (?, ?, ?)`, packet, refund, s.now()); err != nil {
			return err
		}
		if refund == 0 {
			return nil
		}
		return s.credit(ctx, tx, sh, p.Sender, refund)
	})
	if errors.Is(err, errRefundedMeanwhile) {
		return s.Refund(ctx, packet)
	}
	if err != nil {
		return 0, fmt.Errorf("redpacket: refund %d: %w", packet, err)
	}
	s.rdb.Del(ctx, list) // nothing left to open; the state stays for views
	return refund, nil
}

var errRefundedMeanwhile = errors.New("redpacket: refunded by a concurrent call")

// RefundDue refunds the expired packets still open, at most batch per
// table, and returns how many it refunded and how many wait behind the
// fence. Run it every minute or so; it is idempotent.
func (s *Service) RefundDue(ctx context.Context, batch int) (refunded, fenced int, err error) {
	if batch < 1 {
		return 0, 0, fmt.Errorf("%w: batch %d", ErrInvalid, batch)
	}
	for _, sh := range s.router.All() {
		var ids []int64
		if err := sh.DB.SelectContext(ctx, &ids, `SELECT id FROM `+sh.Table+` WHERE status = ? AND expires_at <= ? ORDER BY expires_at LIMIT ?`, StatusOpen, s.now(), batch); err != nil {
			return refunded, fenced, fmt.Errorf("redpacket: due refunds in %s: %w", sh.Table, err)
		}
		for _, id := range ids {
			_, err := s.Refund(ctx, id)
			switch {
			case errors.Is(err, ErrFence):
				fenced++
			case err != nil:
				return refunded, fenced, err
			default:
				refunded++
			}
		}
	}
	return refunded, fenced, nil
}
