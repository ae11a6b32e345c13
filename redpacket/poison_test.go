package redpacket_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/redpacket"
)

// TestPoisonClaimsDoNotBlock: malformed or conflicting claim messages
// between good ones on one partition are skipped with a count by a real
// consumer group, the claims behind them are recorded and credited, and the
// books balance.
func TestPoisonClaimsDoNotBlock(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), redpacket.Config{})
	p := f.send("boss", 1000, 10, redpacket.Random)
	for u := range 10 {
		if _, err := f.s.Open(ctx, p.ID, fmt.Sprint("u", u)); err != nil {
			t.Fatal(err)
		}
	}
	claims := &testenv.Published{}
	if _, err := outbox.NewRelay(f.r.Client, f.s.Outboxes(), "claims", claims).DrainAll(ctx); err != nil || len(claims.Msgs) != 10 {
		t.Fatalf("relayed %d claims, want 10: %v", len(claims.Msgs), err)
	}
	// A claim already recorded, told again with another amount, is a
	// conflict, not a redelivery.
	first, err := redpacket.DecodeClaim(claims.Msgs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	poison := []string{
		`nope`,
		`{"v":2}`,
		`{"v":1,"packet":1,"user":"x","amount":0,"index":1,"at":0}`,
		fmt.Sprintf(`{"v":1,"packet":%d,"user":"u0","amount":5,"index":1,"at":1,"extra":true}`, p.ID),
		fmt.Sprintf(`{"v":1,"packet":%d,"user":"u0","amount":5,"index":1,"at":1}]`, p.ID),
		fmt.Sprintf(`{"v":1,"packet":%d,"user":"nobody","amount":100000,"index":99,"at":1}`, p.ID),
		fmt.Sprintf(`{"v":1,"packet":%d,"user":%q,"amount":%d,"index":%d,"at":%d}`, first.Packet, first.Claims[0].User, first.Claims[0].Amount+1, first.Claims[0].Index, first.At),
		fmt.Sprintf(`{"v":2,"packet":%d,"at":1,"claims":[{"user":"u0","amount":5,"index":1},{"user":"u0","amount":6,"index":2}]}`, p.ID),
		fmt.Sprintf(`{"v":2,"packet":%d,"at":1,"claims":[]}`, p.ID),
		`null`,
	}
	var values [][]byte
	for i, m := range claims.Msgs {
		if i == 5 { // half the claims, the poison, the other half
			for _, s := range poison {
				values = append(values, []byte(s))
			}
		}
		values = append(values, m.Value)
	}
	c, bad := testenv.ConsumeInOrder(t, values, f.s.Handle, redpacket.ErrBadMessage)
	if c.Poisoned() != int64(len(poison)) || bad != len(poison) || c.Handled() != 10 {
		t.Fatalf("poisoned %d (%d ErrBadMessage), handled %d; want %d poisoned, 10 handled", c.Poisoned(), bad, c.Handled(), len(poison))
	}
	if b := f.balanced(); b.Claimed != 1000 || b.Credited != 1000 {
		t.Fatalf("claimed %d, credited %d; want the whole 1,000 fen after the poison", b.Claimed, b.Credited)
	}
}
