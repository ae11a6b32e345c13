package redpacket

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"
	"golang.org/x/sync/errgroup"

	"github.com/casebook-dev/casebook/internal/gene"
)

// Claim is one share a user took, as the SQL ledger holds it.
type Claim struct {
	Packet    int64  `db:"packet_id" json:"packet"`
	User      string `db:"user_id" json:"user"`
	Amount    int64  `db:"amount" json:"amount"`
	Index     int    `db:"idx" json:"index"`
	ClaimedAt int64  `db:"claimed_at" json:"claimed_at"`
}

// Claims lists the claims of a packet recorded in SQL, in draw order.
func (s *Service) Claims(ctx context.Context, packet int64) ([]Claim, error) {
	ctx, call := s.obs.claims.Start(ctx)
	cs, err := s.claims(ctx, packet)
	return cs, call.End(err)
}

func (s *Service) claims(ctx context.Context, packet int64) ([]Claim, error) {
	if err := validPacket(packet); err != nil {
		return nil, err
	}
	sh := s.shardOfPacket(packet)
	var out []Claim
	for _, table := range []string{gene.Sibling(sh, "rp_claims"), gene.Sibling(sh, "rp_claims_archive")} {
		var cs []Claim
		if err := sh.DB.SelectContext(ctx, &cs, `SELECT packet_id, user_id, amount, idx, claimed_at FROM `+table+` WHERE packet_id = ? ORDER BY idx`, packet); err != nil {
			return nil, fmt.Errorf("redpacket: claims of %d: %w", packet, err)
		}
		out = append(out, cs...)
	}
	return out, nil
}

// Detail is a packet with its claims and the luckiest one (the largest
// share; the earliest of equal ones). Luckiest is nil before any claim.
type Detail struct {
	Packet   Packet  `json:"packet"`
	Claims   []Claim `json:"claims"`
	Luckiest *Claim  `json:"luckiest,omitempty"`
}

// Detail returns packet's detail view from SQL.
func (s *Service) Detail(ctx context.Context, packet int64) (Detail, error) {
	ctx, call := s.obs.detail.Start(ctx)
	d, err := s.detail(ctx, packet)
	return d, call.End(err)
}

func (s *Service) detail(ctx context.Context, packet int64) (Detail, error) {
	p, err := s.get(ctx, packet)
	if err != nil {
		return Detail{}, err
	}
	cs, err := s.claims(ctx, packet)
	if err != nil {
		return Detail{}, err
	}
	d := Detail{Packet: p, Claims: cs}
	for i := range cs {
		if d.Luckiest == nil || cs[i].Amount > d.Luckiest.Amount || cs[i].Amount == d.Luckiest.Amount && cs[i].ClaimedAt < d.Luckiest.ClaimedAt {
			d.Luckiest = &cs[i]
		}
	}
	return d, nil
}

func pageCursor(cursor string) (int64, error) {
	if cursor == "" {
		return 1<<63 - 1, nil
	}
	v, err := strconv.ParseInt(cursor, 36, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%w: cursor %q", ErrInvalid, cursor)
	}
	return v, nil
}

// Sent pages through the packets user sent, newest first, n (1..100) at a
// time after cursor ("" first); it returns the next cursor, "" at the end.
// They are in the user's shard, hot or archived.
func (s *Service) Sent(ctx context.Context, user, cursor string, n int) ([]Packet, string, error) {
	ctx, call := s.obs.sent.Start(ctx)
	ps, next, err := s.sent(ctx, user, cursor, n)
	return ps, next, call.End(err)
}

func (s *Service) sent(ctx context.Context, user, cursor string, n int) ([]Packet, string, error) {
	before, err := pageCursor(cursor)
	if err != nil || validUser(user) != nil || n < 1 || n > 100 {
		return nil, "", fmt.Errorf("%w: sent of %q, cursor %q, %d: %v", ErrInvalid, user, cursor, n, err)
	}
	sh := s.shardOfUser(user)
	page := func(table string) string {
		return `SELECT * FROM (` + packetSelect + table + ` WHERE sender = ? AND id < ? ORDER BY id DESC LIMIT ?) `
	}
	// A packet is in exactly one of the tables whenever a page is read, and
	// the cursor is its id, so a page never shows one twice.
	q := packetSelect + `(` + page(sh.Table) + `h UNION ALL ` + page(gene.Sibling(sh, "rp_packets_archive")) + `a) t ORDER BY id DESC LIMIT ?`
	var ps []Packet
	if err := sh.DB.SelectContext(ctx, &ps, q, user, before, n, user, before, n, n); err != nil {
		return nil, "", fmt.Errorf("redpacket: sent by %s: %w", user, err)
	}
	if len(ps) < n {
		return ps, "", nil
	}
	return ps, strconv.FormatInt(ps[len(ps)-1].ID, 36), nil
}

// Received pages through the shares user received, newest packet first, as
// Sent does; they are in the user's shard.
func (s *Service) Received(ctx context.Context, user, cursor string, n int) ([]Claim, string, error) {
	ctx, call := s.obs.received.Start(ctx)
	cs, next, err := s.received(ctx, user, cursor, n)
	return cs, next, call.End(err)
}

func (s *Service) received(ctx context.Context, user, cursor string, n int) ([]Claim, string, error) {
	before, err := pageCursor(cursor)
	if err != nil || validUser(user) != nil || n < 1 || n > 100 {
		return nil, "", fmt.Errorf("%w: received of %q, cursor %q, %d: %v", ErrInvalid, user, cursor, n, err)
	}
	sh := s.shardOfUser(user)
	var cs []Claim
	if err := sh.DB.SelectContext(ctx, &cs, `SELECT packet_id, user_id, amount, 0 AS idx, claimed_at FROM `+gene.Sibling(sh, "rp_received")+`
		WHERE user_id = ? AND packet_id < ? ORDER BY packet_id DESC LIMIT ?`, user, before, n); err != nil {
		return nil, "", fmt.Errorf("redpacket: received by %s: %w", user, err)
	}
	if len(cs) < n {
		return cs, "", nil
	}
	return cs, strconv.FormatInt(cs[len(cs)-1].Packet, 36), nil
}

// Archive moves refunded packets whose expiry is older than before, with
// their claims, from the hot tables to the archive tables — batch packets
// per table per transaction, so new sends and claims never wait long — and
// returns how many it moved. Reads (Get, Claims, Detail) look in both.
func (s *Service) Archive(ctx context.Context, before time.Time, batch int) (int, error) {
	ctx, call := s.obs.archive.Start(ctx)
	moved, err := s.archive(ctx, before, batch)
	return moved, call.End(err)
}

func (s *Service) archive(ctx context.Context, before time.Time, batch int) (int, error) {
	if batch < 1 {
		return 0, fmt.Errorf("%w: batch %d", ErrInvalid, batch)
	}
	moved := 0
	for _, sh := range s.router.All() {
		var ids []int64
		if err := sh.DB.SelectContext(ctx, &ids, `SELECT id FROM `+sh.Table+` WHERE status = ? AND expires_at < ? LIMIT ?`, StatusRefunded, before.UnixMilli(), batch); err != nil {
			return moved, fmt.Errorf("redpacket: archive %s: %w", sh.Table, err)
		}
		if len(ids) == 0 {
			continue
		}
		err := inTx(ctx, sh.DB, func(tx *sqlx.Tx) error {
			for _, step := range []string{
				`INSERT INTO ` + gene.Sibling(sh, "rp_packets_archive") + ` SELECT * FROM ` + sh.Table + ` WHERE status = ? AND id IN (?)`,
				`INSERT INTO ` + gene.Sibling(sh, "rp_claims_archive") + ` SELECT c.* FROM ` + gene.Sibling(sh, "rp_claims") + ` c JOIN ` + sh.Table + ` p ON p.id = c.packet_id WHERE p.status = ? AND c.packet_id IN (?)`,
				`DELETE FROM ` + gene.Sibling(sh, "rp_claims") + ` WHERE packet_id IN (SELECT id FROM ` + sh.Table + ` WHERE status = ?) AND packet_id IN (?)`,
				`DELETE FROM ` + sh.Table + ` WHERE status = ? AND id IN (?)`,
			} {
				q, args, err := sqlx.In(step, StatusRefunded, ids)
				if err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, q, args...); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return moved, fmt.Errorf("redpacket: archive %s: %w", sh.Table, err)
		}
		moved += len(ids)
	}
	return moved, nil
}

// Books are the money totals over every shard, in fen. At any moment
// Debited = Claimed + Refunded + Open, and once the consumer is caught up
// Credited = Claimed.
type Books struct {
	Debited  int64 `json:"debited"`  // the totals of every packet sent
	Claimed  int64 `json:"claimed"`  // Σ claims in the packets' ledgers
	Refunded int64 `json:"refunded"` // Σ refunds
	Open     int64 `json:"open"`     // what unrefunded packets still hold unclaimed
	Credited int64 `json:"credited"` // Σ shares credited to receivers
}

// Audit adds up the books over every shard.
func (s *Service) Audit(ctx context.Context) (Books, error) {
	ctx, call := s.obs.audit.Start(ctx)
	b, err := s.audit(ctx)
	return b, call.End(err)
}

func (s *Service) audit(ctx context.Context) (Books, error) {
	parts := make([]Books, len(s.router.All()))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, sh := range s.router.All() {
		g.Go(func() error {
			b := &parts[i]
			for _, t := range []string{sh.Table, gene.Sibling(sh, "rp_packets_archive")} {
				var row struct {
					Total, Claimed, Refunded, Open int64
				}
				err := sh.DB.QueryRowxContext(gctx, `SELECT COALESCE(SUM(total), 0), COALESCE(SUM(claimed_amount), 0), COALESCE(SUM(refund), 0),
					COALESCE(SUM(CASE WHEN status = ? THEN total - claimed_amount ELSE 0 END), 0) FROM `+t, StatusOpen).Scan(&row.Total, &row.Claimed, &row.Refunded, &row.Open)
				if err != nil {
					return fmt.Errorf("redpacket: audit %s: %w", t, err)
				}
				b.Debited += row.Total
				b.Claimed += row.Claimed
				b.Refunded += row.Refunded
				b.Open += row.Open
			}
			return sh.DB.GetContext(gctx, &b.Credited, `SELECT COALESCE(SUM(amount), 0) FROM `+gene.Sibling(sh, "rp_received"))
		})
	}
	if err := g.Wait(); err != nil {
		return Books{}, err
	}
	var total Books
	for _, b := range parts {
		total.Debited += b.Debited
		total.Claimed += b.Claimed
		total.Refunded += b.Refunded
		total.Open += b.Open
		total.Credited += b.Credited
	}
	return total, nil
}
