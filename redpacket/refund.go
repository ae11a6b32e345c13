package redpacket

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/gene"
)

var (
	//go:embed close.lua
	closeLua    string
	closeScript = redis.NewScript(closeLua)
)

// Refund returns what is left of an expired packet to its sender, once:
// total − Σ claims, computed from the SQL ledger, behind a unique refund
// row, with the sender's credit and the packet's "refunded" mark in the
// same transaction. It returns the amount refunded (0 for a packet fully
// claimed). A refunded packet returns its refund again.
//
// First it closes the packet in Redis, atomically: from then on no open
// succeeds, whatever the opener's clock says, so every claim Redis ever
// accepted is among those the close returns. Then it checks them against
// the ledger: a claim SQL can still take — neither its user nor its share
// is in the ledger — is on its way (the relay or the consumer is behind),
// and the refund waits with ErrFence. A claim SQL can never take (its share
// or its user is there already: Redis lost state) does not hold it back. A
// packet whose Redis state is gone is refunded from the ledger alone once
// LostStateGrace has passed after its expiry. The close is idempotent, so
// a retried call — go-redis' after a lost reply, or the caller's — is
// harmless. (A claim Redis holds without its index, from an older version,
// waits for its user until LostStateGrace has passed.)
func (s *Service) Refund(ctx context.Context, packet int64) (int64, error) {
	ctx, call := s.obs.refund.Start(ctx)
	n, err := s.refund(ctx, packet)
	return n, call.End(err)
}

func (s *Service) refund(ctx context.Context, packet int64) (int64, error) {
	p, err := s.get(ctx, packet)
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
	redisClaims, lost, err := s.closePacket(ctx, p)
	if err != nil {
		return 0, err
	}
	if lost && now.Before(expires.Add(s.cfg.LostStateGrace)) { // messages relayed before the loss may be on their way
		s.obs.fencedRefund(ctx, true)
		s.log.Warn("redpacket: refund fenced: the packet has no Redis state", "packet", packet, "refund_after", expires.Add(s.cfg.LostStateGrace))
		return 0, fmt.Errorf("%w: packet %d has no Redis state; refunding from SQL after %v", ErrFence, packet, expires.Add(s.cfg.LostStateGrace))
	}
	ledger, err := s.claims(ctx, packet)
	if err != nil {
		return 0, err
	}
	pastGrace := !now.Before(expires.Add(s.cfg.LostStateGrace))
	if lost {
		s.log.Warn("redpacket: refunding from SQL alone: the packet's Redis state is gone and its grace has passed", "packet", packet, "claims", len(ledger))
	}
	if n := onTheirWay(redisClaims, ledger, pastGrace); n > 0 {
		s.obs.fencedRefund(ctx, false)
		s.log.Info("redpacket: refund fenced: claims accepted by Redis are not in SQL yet", "packet", packet, "claims", n)
		return 0, fmt.Errorf("%w: %d claims of packet %d accepted by Redis are not in SQL yet", ErrFence, n, packet)
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
		return s.refund(ctx, packet)
	}
	if err != nil {
		return 0, fmt.Errorf("redpacket: refund %d: %w", packet, err)
	}
	return refund, nil
}

var errRefundedMeanwhile = errors.New("redpacket: refunded by a concurrent call")

// redisClaim is a claim as the packet's Redis state holds it; index is 0
// for a claim recorded before Redis kept the index.
type redisClaim struct {
	user  string
	index int
}

// closePacket closes p in Redis and returns the claims Redis holds, or lost
// when Redis has no state of p.
func (s *Service) closePacket(ctx context.Context, p Packet) (claims []redisClaim, lost bool, err error) {
	state, list := s.packetKeys(p.ID)
	reply, err := closeScript.Run(ctx, s.rdb, []string{state, list}, s.keep(p)).StringSlice()
	if err != nil {
		return nil, false, fmt.Errorf("redpacket: close packet %d: %w", p.ID, err)
	}
	if len(reply)%2 != 1 {
		return nil, false, fmt.Errorf("redpacket: close packet %d: unexpected reply %q", p.ID, reply)
	}
	if reply[0] == "lost" {
		return nil, true, nil
	}
	for i := 1; i < len(reply); i += 2 {
		user, ok := strings.CutPrefix(reply[i], "u:")
		if !ok {
			continue
		}
		c := redisClaim{user: user}
		if idx, _, ok := strings.Cut(reply[i+1], ":"); ok {
			c.index, _ = strconv.Atoi(idx)
		}
		claims = append(claims, c)
	}
	return claims, false, nil
}

// onTheirWay counts the claims Redis accepted that the ledger can still
// take: their user holds no share in it and their share is nobody's. A
// claim whose share or user is in the ledger already is settled — credited,
// or refused for good because Redis lost state and gave it out again. A
// claim without its index (recorded by an older version) waits for its
// user until pastGrace.
func onTheirWay(claims []redisClaim, ledger []Claim, pastGrace bool) int {
	users, shares := map[string]bool{}, map[int]bool{}
	for _, c := range ledger {
		users[c.User], shares[c.Index] = true, true
	}
	n := 0
	for _, c := range claims {
		if !users[c.user] && (c.index == 0 && !pastGrace || c.index > 0 && !shares[c.index]) {
			n++
		}
	}
	return n
}

// RefundDue refunds the expired packets still open, at most batch per
// table, and returns how many it refunded and how many wait behind the
// fence. Run it every minute or so; it is idempotent.
func (s *Service) RefundDue(ctx context.Context, batch int) (refunded, fenced int, err error) {
	ctx, call := s.obs.refundDue.Start(ctx)
	refunded, fenced, err = s.refundDue(ctx, batch)
	return refunded, fenced, call.End(err)
}

func (s *Service) refundDue(ctx context.Context, batch int) (refunded, fenced int, err error) {
	if batch < 1 {
		return 0, 0, fmt.Errorf("%w: batch %d", ErrInvalid, batch)
	}
	for _, sh := range s.router.All() {
		var ids []int64
		if err := sh.DB.SelectContext(ctx, &ids, `SELECT id FROM `+sh.Table+` WHERE status = ? AND expires_at <= ? ORDER BY expires_at LIMIT ?`, StatusOpen, s.now(), batch); err != nil {
			return refunded, fenced, fmt.Errorf("redpacket: due refunds in %s: %w", sh.Table, err)
		}
		for _, id := range ids {
			_, err := s.refund(ctx, id)
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
