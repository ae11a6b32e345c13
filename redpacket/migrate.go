package redpacket

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/casebook-dev/casebook/internal/gene"
	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/shard"
)

const (
	packetColumns = `id BIGINT NOT NULL PRIMARY KEY,
		sender {{key}} NOT NULL,
		request_id {{key}} NOT NULL,
		kind VARCHAR(8) NOT NULL,
		total BIGINT NOT NULL,
		count INT NOT NULL,
		shares TEXT NOT NULL,
		recipient {{key}} NOT NULL,
		greeting VARCHAR(255) NOT NULL,
		status VARCHAR(16) NOT NULL,
		claimed_count INT NOT NULL,
		claimed_amount BIGINT NOT NULL,
		refund BIGINT NOT NULL,
		created_at BIGINT NOT NULL,
		expires_at BIGINT NOT NULL`
	claimColumns = `packet_id BIGINT NOT NULL,
		user_id {{key}} NOT NULL,
		amount BIGINT NOT NULL,
		idx INT NOT NULL,
		claimed_at BIGINT NOT NULL,
		PRIMARY KEY (packet_id, user_id)`
)

// tables lists one shard's tables. Everything of a packet — its row, its
// claims ledger, its refund — lives in the sender's shard (the packet id
// carries the sender's gene); a user's wallet and received history in the
// user's. The archive tables hold packets moved out of the hot ones.
func tables(sh shard.Shard) []sqlutil.Table {
	return []sqlutil.Table{
		{Name: sh.Table, Columns: packetColumns, Indexes: []string{"UNIQUE uq_request (sender, request_id)", "ix_due (status, expires_at)", "ix_sender (sender, id)"}},
		{Name: gene.Sibling(sh, "rp_claims"), Columns: claimColumns, Indexes: []string{"UNIQUE uq_share (packet_id, idx)"}},
		{Name: gene.Sibling(sh, "rp_refunds"), Columns: `packet_id BIGINT NOT NULL PRIMARY KEY, amount BIGINT NOT NULL, refunded_at BIGINT NOT NULL`},
		{Name: gene.Sibling(sh, "rp_received"), Columns: `user_id {{key}} NOT NULL, packet_id BIGINT NOT NULL, amount BIGINT NOT NULL, claimed_at BIGINT NOT NULL, PRIMARY KEY (user_id, packet_id)`},
		{Name: gene.Sibling(sh, "rp_wallets"), Columns: `user_id {{key}} NOT NULL PRIMARY KEY, balance BIGINT NOT NULL`},
		{Name: gene.Sibling(sh, "rp_packets_archive"), Columns: packetColumns, Indexes: []string{"ix_sender (sender, id)"}},
		{Name: gene.Sibling(sh, "rp_claims_archive"), Columns: claimColumns},
	}
}

// Migrate creates every table that does not exist yet.
func (s *Service) Migrate(ctx context.Context) error {
	if err := s.idSrc.CreateTable(ctx); err != nil {
		return fmt.Errorf("redpacket: migrate: %w", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, sh := range s.router.All() {
		g.Go(func() error {
			for _, t := range tables(sh) {
				if err := t.Create(gctx, sh.DB); err != nil {
					return fmt.Errorf("redpacket: migrate: %w", err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}
