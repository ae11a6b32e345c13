package redpacket_test

import (
	"context"
	"errors"
	"testing"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/redpacket"
)

// TestPacketIDOutOfRange: a packet id ≤ 0 is ErrInvalid at every entry
// point that takes one.
func TestPacketIDOutOfRange(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), redpacket.Config{})
	for _, id := range []int64{0, -1, -1 << 62} {
		calls := map[string]error{
			"Grab": f.s.Grab(ctx, id, "u"),
		}
		_, calls["Open"] = f.s.Open(ctx, id, "u")
		calls["OpenMany"] = f.s.OpenMany(ctx, []redpacket.OpenRequest{{Packet: id, User: "u"}})[0].Err
		_, calls["Get"] = f.s.Get(ctx, id)
		_, calls["Detail"] = f.s.Detail(ctx, id)
		_, calls["Claims"] = f.s.Claims(ctx, id)
		_, calls["Refund"] = f.s.Refund(ctx, id)
		for name, err := range calls {
			if !errors.Is(err, redpacket.ErrInvalid) {
				t.Errorf("%s(%d): %v, want ErrInvalid", name, id, err)
			}
		}
	}
}

// TestExclusiveOneShare: a packet for one recipient has one share — its
// recipient can take only one — so more is refused and debits nothing.
func TestExclusiveOneShare(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), redpacket.Config{})
	if err := f.s.Deposit(ctx, "boss", 1000); err != nil {
		t.Fatal(err)
	}
	_, err := f.s.Send(ctx, redpacket.SendRequest{Sender: "boss", RequestID: "two", Total: 1000, Count: 2, Recipient: "ann"})
	if !errors.Is(err, redpacket.ErrInvalid) {
		t.Fatalf("an exclusive packet of two shares: %v", err)
	}
	if bal, _ := f.s.Balance(ctx, "boss"); bal != 1000 {
		t.Fatalf("the refused send debited: balance %d", bal)
	}
	p, err := f.s.Send(ctx, redpacket.SendRequest{Sender: "boss", RequestID: "one", Total: 1000, Count: 1, Recipient: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := f.s.Open(ctx, p.ID, "ann"); v != 1000 || err != nil {
		t.Fatalf("the recipient opened %d: %v", v, err)
	}
	f.balanced()
}
