package redpacket

import (
	"context"
	"fmt"
)

// reopenBatch is how many packets Reopen reads from a table at a time.
const reopenBatch = 500

// Reopen puts every live packet — open in SQL and not expired — back into
// Redis whose state Redis does not hold (a restart without persistence, a
// failover that lost it), and returns how many it reopened. A packet comes
// back with the claims its ledger holds, so a holder opening again gets
// their share, and with only the shares the ledger does not record as
// claimed. A packet Redis holds, or one a refund closed, is left as it is,
// so Reopen is idempotent and safe beside opens, refunds and other
// Reopens. Claims Redis had accepted but not relayed are lost with its
// state (see the package doc). Run it once after Redis comes back empty;
// it reads every live packet from SQL.
func (s *Service) Reopen(ctx context.Context) (int, error) {
	ctx, call := s.obs.reopen.Start(ctx)
	n, err := s.reopen(ctx)
	return n, call.End(err)
}

func (s *Service) reopen(ctx context.Context) (int, error) {
	reopened := 0
	for _, sh := range s.router.All() {
		for after := int64(0); ; {
			var ps []Packet
			if err := sh.DB.SelectContext(ctx, &ps, packetSelect+sh.Table+` WHERE status = ? AND expires_at > ? AND id > ? ORDER BY id LIMIT ?`,
				StatusOpen, s.now(), after, reopenBatch); err != nil {
				return reopened, fmt.Errorf("redpacket: reopen: live packets of %s: %w", sh.Table, err)
			}
			for _, p := range ps {
				created, err := s.open(ctx, p)
				if err != nil {
					return reopened, fmt.Errorf("redpacket: reopen packet %d: %w", p.ID, err)
				}
				if created {
					reopened++
				}
			}
			if len(ps) < reopenBatch {
				break
			}
			after = ps[len(ps)-1].ID
		}
	}
	return reopened, nil
}
