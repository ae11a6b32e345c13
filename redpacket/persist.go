package redpacket

import (
	"context"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/internal/strictjson"
	"github.com/casebook-dev/casebook/outbox"
)

// ClaimVersion is the format version of claim messages.
const ClaimVersion = 1

// ClaimMessage is what the outbox relays for each claim, keyed by packet
// id, as JSON: {"v":1,"packet":…,"user":"…","amount":…,"index":…,"at":…}.
type ClaimMessage struct {
	V      int    `json:"v"`
	Packet int64  `json:"packet"`
	User   string `json:"user"`
	Amount int64  `json:"amount"` // fen
	Index  int    `json:"index"`  // which share of the draw, 1-based
	At     int64  `json:"at"`     // Unix ms
}

// DecodeClaim parses a claim message value; anything else is
// ErrBadMessage, marked outbox.ErrPoison.
func DecodeClaim(value []byte) (ClaimMessage, error) {
	var m ClaimMessage
	err := strictjson.Decode(value, &m)
	if err == nil && (m.V != ClaimVersion || m.Packet <= 0 || m.Amount < 1 || m.Index < 1 || validUser(m.User) != nil) {
		err = fmt.Errorf("%.200q", value)
	}
	if err != nil {
		return ClaimMessage{}, outbox.Poison(fmt.Errorf("%w: %w", ErrBadMessage, err))
	}
	return m, nil
}

// Handle is the outbox.Handler of the claim topic: it records a claim in
// the packet's ledger and credits the receiver, each exactly once however
// often the message comes. First, in the packet's shard, one transaction
// inserts the claim (unique on packet and user) and adds it to the packet's
// claimed totals — guarded, so the claims can never exceed the packet's
// total nor land on a refunded packet; then, in the receiver's shard, one
// transaction inserts the received row (unique on user and packet) and
// credits the wallet. A redelivery finds both rows and changes nothing; a
// crash between the two is finished by the redelivery.
func (s *Service) Handle(ctx context.Context, _, value []byte) error {
	m, err := DecodeClaim(value)
	if err != nil {
		return err
	}
	if err := s.recordClaim(ctx, m); err != nil {
		return err
	}
	return s.creditReceiver(ctx, m)
}

func (s *Service) recordClaim(ctx context.Context, m ClaimMessage) error {
	sh := s.shardOfPacket(m.Packet)
	return inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+gene.Sibling(sh, "rp_claims")+` (packet_id, user_id, amount, idx, claimed_at) VALUES (?, ?, ?, ?, ?)`,
			m.Packet, m.User, m.Amount, m.Index, m.At)
		if sqlutil.IsDuplicate(err) {
			var mine []struct {
				Amount int64 `db:"amount"`
				Index  int   `db:"idx"`
			}
			if err := tx.SelectContext(ctx, &mine, `SELECT amount, idx FROM `+gene.Sibling(sh, "rp_claims")+` WHERE packet_id = ? AND user_id = ?`, m.Packet, m.User); err != nil {
				return fmt.Errorf("redpacket: record claim: %w", err)
			}
			if len(mine) == 1 {
				if mine[0].Amount != m.Amount || mine[0].Index != m.Index {
					// Not a redelivery: the user's claim says otherwise.
					return outbox.Poison(fmt.Errorf("%w: %s claims share %d (%d fen) of packet %d, recorded as share %d (%d fen)",
						ErrBadMessage, m.User, m.Index, m.Amount, m.Packet, mine[0].Index, mine[0].Amount))
				}
				return nil // recorded before
			}
			// The same share given twice: Redis lost the first claim (a
			// failover) after it was relayed. The first one stands.
			return outbox.Poison(fmt.Errorf("%w: share %d of packet %d went to another user first", ErrLateClaim, m.Index, m.Packet))
		}
		if err != nil {
			return fmt.Errorf("redpacket: record claim: %w", err)
		}
		res, err := tx.ExecContext(ctx, `UPDATE `+sh.Table+` SET claimed_count = claimed_count + 1, claimed_amount = claimed_amount + ?
			WHERE id = ? AND status = ? AND claimed_amount + ? <= total AND claimed_count < count`, m.Amount, m.Packet, StatusOpen, m.Amount)
		if err != nil {
			return fmt.Errorf("redpacket: record claim: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			p, err := s.load(ctx, tx, sh, m.Packet)
			switch {
			case errors.Is(err, ErrNotFound):
				return outbox.Poison(fmt.Errorf("%w: claim on unknown packet %d", ErrBadMessage, m.Packet))
			case err != nil:
				return err
			case p.Status == StatusRefunded:
				return outbox.Poison(fmt.Errorf("%w: %d fen to %s on packet %d", ErrLateClaim, m.Amount, m.User, m.Packet))
			}
			return outbox.Poison(fmt.Errorf("%w: claim of %d fen would exceed packet %d (%d of %d claimed)", ErrBadMessage, m.Amount, m.Packet, p.ClaimedAmount, p.Total))
		}
		return nil
	})
}

func (s *Service) creditReceiver(ctx context.Context, m ClaimMessage) error {
	sh := s.shardOfUser(m.User)
	return inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+gene.Sibling(sh, "rp_received")+` (user_id, packet_id, amount, claimed_at) VALUES (?, ?, ?, ?)`,
			m.User, m.Packet, m.Amount, m.At)
		if sqlutil.IsDuplicate(err) {
			return nil // credited before
		}
		if err != nil {
			return fmt.Errorf("redpacket: credit claim: %w", err)
		}
		return s.credit(ctx, tx, sh, m.User, m.Amount)
	})
}
