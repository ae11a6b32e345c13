package redpacket

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/internal/strictjson"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/shard"
)

// ClaimVersion is the format version of the claim messages Open writes.
// DecodeClaim also reads version 1 (one claim a message), which Open wrote
// before, so that messages still in a stream or a topic at an upgrade are
// consumed.
const ClaimVersion = 2

// ClaimMessage is what the outbox relays, keyed by packet id: the claims one
// script call made on one packet, as JSON of format version 2:
//
//	{"v":2,"packet":…,"at":…,"claims":[{"user":"…","amount":…,"index":…},…]}
//
// Format version 1 carried one claim:
//
//	{"v":1,"packet":…,"user":"…","amount":…,"index":…,"at":…}
//
// Decoding is strict (no unknown field, nothing after the value), and a
// message's claims name distinct users and distinct shares.
type ClaimMessage struct {
	V      int            `json:"v"`
	Packet int64          `json:"packet"`
	At     int64          `json:"at"` // Unix ms
	Claims []ClaimedShare `json:"claims"`
}

// ClaimedShare is one claim of a ClaimMessage.
type ClaimedShare struct {
	User   string `json:"user"`
	Amount int64  `json:"amount"` // fen
	Index  int    `json:"index"`  // which share of the draw, 1-based
}

// claimV1 is a claim message of format version 1.
type claimV1 struct {
	V      int    `json:"v"`
	Packet int64  `json:"packet"`
	User   string `json:"user"`
	Amount int64  `json:"amount"`
	Index  int    `json:"index"`
	At     int64  `json:"at"`
}

// DecodeClaim parses a claim message value of format version 2, or 1 (read
// as a version 2 message of its one claim); anything else is ErrBadMessage,
// marked outbox.ErrPoison.
func DecodeClaim(value []byte) (ClaimMessage, error) {
	m, err := decodeClaim(value)
	if err == nil {
		err = m.check()
	}
	if err != nil {
		return ClaimMessage{}, outbox.Poison(fmt.Errorf("%w: %w in %.200q", ErrBadMessage, err, value))
	}
	return m, nil
}

func decodeClaim(value []byte) (ClaimMessage, error) {
	var head struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal(value, &head); err != nil {
		return ClaimMessage{}, err
	}
	switch head.V {
	case 1:
		var c claimV1
		if err := strictjson.Decode(value, &c); err != nil {
			return ClaimMessage{}, err
		}
		return ClaimMessage{V: ClaimVersion, Packet: c.Packet, At: c.At, Claims: []ClaimedShare{{User: c.User, Amount: c.Amount, Index: c.Index}}}, nil
	case ClaimVersion:
		var m ClaimMessage
		err := strictjson.Decode(value, &m)
		return m, err
	}
	return ClaimMessage{}, fmt.Errorf("format version %d", head.V)
}

func (m ClaimMessage) check() error {
	if m.Packet <= 0 || len(m.Claims) == 0 || len(m.Claims) > OpensPerCall {
		return fmt.Errorf("packet %d with %d claims", m.Packet, len(m.Claims))
	}
	users, shares := map[string]bool{}, map[int]bool{}
	for _, c := range m.Claims {
		switch {
		case c.Amount < 1 || c.Index < 1 || validUser(c.User) != nil:
			return fmt.Errorf("claim %+v", c)
		case users[c.User] || shares[c.Index]:
			return fmt.Errorf("user %q or share %d claimed twice", c.User, c.Index)
		}
		users[c.User], shares[c.Index] = true, true
	}
	return nil
}

// Handle is the outbox.Handler of the claim topic: it records a message's
// claims in the packet's ledger and credits their receivers, each exactly
// once however often the message comes. Every claim is checked against the
// packet's shares as drawn at Send (in its SQL row): a claim whose index is
// not one of them, or whose amount is not that share's, is poison and
// changes nothing. First, in the packet's shard, one
// transaction inserts the claims (unique on packet and user, and on packet
// and share) and adds the new ones to the packet's claimed totals —
// guarded, so the claims can never exceed the packet's total nor land on a
// refunded packet; then, in each receiver's shard, one transaction inserts
// the received rows (unique on user and packet) and credits the wallets. A
// redelivery finds every row and changes nothing; a crash between the two
// is finished by the redelivery. A claim SQL cannot take — the user holds
// another share of the packet, or the share went to another user — does not
// hold back the others of its message: they are recorded and credited, and
// Handle then returns the refused ones as poison.
func (s *Service) Handle(ctx context.Context, _, value []byte) error {
	ctx, call := s.obs.handle.Start(ctx)
	return call.End(s.handle(ctx, value))
}

func (s *Service) handle(ctx context.Context, value []byte) error {
	m, err := DecodeClaim(value)
	if err != nil {
		return err
	}
	recorded, refused, err := s.recordClaims(ctx, m)
	if err != nil {
		return err
	}
	if err := s.creditReceivers(ctx, m, recorded); err != nil {
		return err
	}
	return refused
}

// recordClaims records m's claims in the packet's shard and returns those
// the ledger holds (now or before) and, as poison, the refused ones.
func (s *Service) recordClaims(ctx context.Context, m ClaimMessage) (recorded []ClaimedShare, refused, err error) {
	sh := s.shardOfPacket(m.Packet)
	p, err := s.load(ctx, sh.DB, sh, m.Packet)
	if errors.Is(err, ErrNotFound) {
		return nil, outbox.Poison(fmt.Errorf("%w: claims on unknown packet %d", ErrBadMessage, m.Packet)), nil
	}
	if err != nil {
		return nil, nil, err
	}
	drawn, err := p.drawn()
	if err != nil {
		return nil, nil, err
	}
	var before, fresh []ClaimedShare
	var bad []error
	err = inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
		before, fresh, bad = nil, nil, nil
		var amount int64
		for _, c := range m.Claims {
			if c.Index > len(drawn) || c.Amount != drawn[c.Index-1] {
				// Not a share of this packet's draw: forged or corrupted.
				bad = append(bad, outbox.Poison(fmt.Errorf("%w: %s claims share %d of packet %d for %d fen; the draw has %d shares%s",
					ErrBadMessage, c.User, c.Index, m.Packet, c.Amount, len(drawn), drawnShare(drawn, c.Index))))
				continue
			}
			isNew, err := s.insertClaim(ctx, tx, sh, m, c)
			switch {
			case errors.Is(err, outbox.ErrPoison):
				bad = append(bad, err)
			case err != nil:
				return err
			case isNew:
				fresh, amount = append(fresh, c), amount+c.Amount
			default:
				before = append(before, c)
			}
		}
		if len(fresh) == 0 {
			return nil
		}
		return s.addClaimed(ctx, tx, sh, m.Packet, len(fresh), amount)
	})
	switch {
	case errors.Is(err, outbox.ErrPoison): // the new claims were rolled back
		return before, errors.Join(append(bad, err)...), nil
	case err != nil:
		return nil, nil, err
	}
	return append(before, fresh...), errors.Join(bad...), nil
}

// insertClaim inserts c into the ledger; it tells whether c is new, and
// returns poison for a claim the ledger contradicts.
func (s *Service) insertClaim(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, m ClaimMessage, c ClaimedShare) (bool, error) {
	_, err := tx.ExecContext(ctx, `INSERT INTO `+gene.Sibling(sh, "rp_claims")+` (packet_id, user_id, amount, idx, claimed_at) VALUES (?, ?, ?, ?, ?)`,
		m.Packet, c.User, c.Amount, c.Index, m.At)
	if err == nil {
		return true, nil
	}
	if !sqlutil.IsDuplicate(err) {
		return false, fmt.Errorf("redpacket: record claim: %w", err)
	}
	var mine []struct {
		Amount int64 `db:"amount"`
		Index  int   `db:"idx"`
	}
	if err := tx.SelectContext(ctx, &mine, `SELECT amount, idx FROM `+gene.Sibling(sh, "rp_claims")+` WHERE packet_id = ? AND user_id = ?`, m.Packet, c.User); err != nil {
		return false, fmt.Errorf("redpacket: record claim: %w", err)
	}
	if len(mine) == 0 {
		// The same share given twice: Redis lost the first claim (a
		// failover) after it was relayed. The first one stands.
		return false, outbox.Poison(fmt.Errorf("%w: share %d of packet %d went to another user first", ErrLateClaim, c.Index, m.Packet))
	}
	if mine[0].Amount != c.Amount || mine[0].Index != c.Index {
		// Not a redelivery: the user's claim says otherwise.
		return false, outbox.Poison(fmt.Errorf("%w: %s claims share %d (%d fen) of packet %d, recorded as share %d (%d fen)",
			ErrBadMessage, c.User, c.Index, c.Amount, m.Packet, mine[0].Index, mine[0].Amount))
	}
	return false, nil // recorded before
}

// drawnShare describes share index of drawn for an error message.
func drawnShare(drawn []int64, index int) string {
	if index > len(drawn) {
		return ""
	}
	return fmt.Sprintf(", that one of %d fen", drawn[index-1])
}

// addClaimed adds n new claims of amount fen to packet's totals, guarded:
// never beyond its total or its count, never on a refunded packet.
func (s *Service) addClaimed(ctx context.Context, tx *sqlx.Tx, sh shard.Shard, packet int64, n int, amount int64) error {
	res, err := tx.ExecContext(ctx, `UPDATE `+sh.Table+` SET claimed_count = claimed_count + ?, claimed_amount = claimed_amount + ?
		WHERE id = ? AND status = ? AND claimed_amount + ? <= total AND claimed_count + ? <= count`, n, amount, packet, StatusOpen, amount, n)
	if err != nil {
		return fmt.Errorf("redpacket: record claim: %w", err)
	}
	if k, _ := res.RowsAffected(); k > 0 {
		return nil
	}
	p, err := s.load(ctx, tx, sh, packet)
	switch {
	case errors.Is(err, ErrNotFound):
		return outbox.Poison(fmt.Errorf("%w: claims on unknown packet %d", ErrBadMessage, packet))
	case err != nil:
		return err
	case p.Status == StatusRefunded:
		return outbox.Poison(fmt.Errorf("%w: %d claims of %d fen on packet %d", ErrLateClaim, n, amount, packet))
	}
	return outbox.Poison(fmt.Errorf("%w: %d claims of %d fen would exceed packet %d (%d of %d claimed)", ErrBadMessage, n, amount, packet, p.ClaimedAmount, p.Total))
}

// creditReceivers credits each of claims to its receiver once: one
// transaction per receivers' shard, wallets in user order (so two
// consumers never lock them in opposite orders).
func (s *Service) creditReceivers(ctx context.Context, m ClaimMessage, claims []ClaimedShare) error {
	byShard := map[int][]ClaimedShare{}
	var shards []shard.Shard
	for _, c := range claims {
		sh := s.shardOfUser(c.User)
		if byShard[sh.Index] == nil {
			shards = append(shards, sh)
		}
		byShard[sh.Index] = append(byShard[sh.Index], c)
	}
	for _, sh := range shards {
		cs := byShard[sh.Index]
		slices.SortFunc(cs, func(a, b ClaimedShare) int { return cmp.Compare(a.User, b.User) })
		err := inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
			for _, c := range cs {
				_, err := tx.ExecContext(ctx, `INSERT INTO `+gene.Sibling(sh, "rp_received")+` (user_id, packet_id, amount, claimed_at) VALUES (?, ?, ?, ?)`,
					c.User, m.Packet, c.Amount, m.At)
				if sqlutil.IsDuplicate(err) {
					continue // credited before
				}
				if err != nil {
					return fmt.Errorf("redpacket: credit claim: %w", err)
				}
				if err := s.credit(ctx, tx, sh, c.User, c.Amount); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
