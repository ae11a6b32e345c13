package redpacket_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/redpacket"
)

// TestForgedClaimsArePoison: well-formed claim messages whose claims do not
// match the packet's drawn shares — an amount raised by 500 fen, an index
// past the count, an amount of another share — are poison and change
// nothing; the genuine claims beside them in a message are recorded and
// credited all the same, and the genuine message and its replay once.
func TestForgedClaimsArePoison(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), redpacket.Config{})
	p := f.send("boss", 100_000, 10, redpacket.Random)
	var shares []int64
	if err := json.Unmarshal([]byte(p.Shares), &shares); err != nil {
		t.Fatal(err)
	}
	pub := &testenv.Published{}
	relay := outbox.NewRelay(f.r.Client, f.s.Outboxes(), "claims", pub)
	var reqs []redpacket.OpenRequest
	for u := range 4 {
		reqs = append(reqs, redpacket.OpenRequest{Packet: p.ID, User: fmt.Sprint("u", u)})
	}
	for _, r := range f.s.OpenMany(ctx, reqs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if _, err := relay.DrainAll(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := pub.Take()
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	genuine, err := redpacket.DecodeClaim(msgs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	handle := func(m redpacket.ClaimMessage) error {
		b, _ := json.Marshal(m)
		return f.s.Handle(ctx, nil, b)
	}
	// Share 5 and later are still in Redis: nobody holds them.
	forged := []redpacket.ClaimedShare{
		{User: "x1", Index: 5, Amount: shares[4] + 500},
		{User: "x2", Index: len(shares) + 1, Amount: 1},
		{User: "x3", Index: 6, Amount: shares[6]},
		{User: "x4", Index: 0, Amount: shares[0]},
	}
	if forged[2].Amount == shares[5] {
		forged[2].Amount++
	}
	for _, c := range forged {
		// A forged claim beside a genuine one: the genuine one counts.
		err := handle(redpacket.ClaimMessage{V: 2, Packet: p.ID, At: genuine.At, Claims: []redpacket.ClaimedShare{c, genuine.Claims[0]}})
		if !errors.Is(err, outbox.ErrPoison) || !errors.Is(err, redpacket.ErrBadMessage) {
			t.Errorf("forged %+v: %v", c, err)
		}
		v1 := fmt.Sprintf(`{"v":1,"packet":%d,"user":%q,"amount":%d,"index":%d,"at":1}`, p.ID, c.User, c.Amount, c.Index)
		if err := f.s.Handle(ctx, nil, []byte(v1)); !errors.Is(err, outbox.ErrPoison) || !errors.Is(err, redpacket.ErrBadMessage) {
			t.Errorf("forged %s: %v", v1, err)
		}
	}
	if b := f.balanced(); b.Claimed != genuine.Claims[0].Amount {
		t.Fatalf("after the forgeries: claimed %d, want u0's %d", b.Claimed, genuine.Claims[0].Amount)
	}
	for range 2 { // the genuine message and its replay
		if err := handle(genuine); err != nil {
			t.Fatal(err)
		}
	}
	var sum int64
	for _, c := range genuine.Claims {
		sum += c.Amount
		if c.Amount != shares[c.Index-1] {
			t.Fatalf("Open gave %+v, the draw was %d", c, shares[c.Index-1])
		}
	}
	if b := f.balanced(); b.Claimed != sum || b.Credited != sum {
		t.Fatalf("books %+v, want %d claimed", b, sum)
	}
	for _, u := range []string{"x1", "x2", "x3", "x4"} {
		if bal, _ := f.s.Balance(ctx, u); bal != 0 {
			t.Errorf("forger %s was credited %d", u, bal)
		}
	}
	d, _ := f.s.Detail(ctx, p.ID)
	if len(d.Claims) != len(genuine.Claims) {
		t.Fatalf("ledger holds %d claims, want %d", len(d.Claims), len(genuine.Claims))
	}
}
