package redpacket_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/casebook-dev/casebook/redpacket"
)

// Packet, Claim, Detail and Books serialise in snake_case, and a packet's
// pre-drawn split never leaves the process: it would tell a client the
// shares still to be claimed.
func TestWireForm(t *testing.T) {
	p := redpacket.Packet{ID: 7, Sender: "s", RequestID: "r", Kind: redpacket.Random, Total: 100, Count: 2, Greeting: "hi",
		Status: "open", ClaimedCount: 1, ClaimedAmount: 40, CreatedAt: 1, ExpiresAt: 2, Shares: "[40,60]"}
	c := redpacket.Claim{Packet: 7, User: "u", Amount: 40, Index: 0, ClaimedAt: 1}
	b, err := json.Marshal(redpacket.Detail{Packet: p, Claims: []redpacket.Claim{c}, Luckiest: &c})
	if err != nil {
		t.Fatal(err)
	}
	claim := `{"packet":7,"user":"u","amount":40,"index":0,"claimed_at":1}`
	want := `{"packet":{"id":7,"sender":"s","request_id":"r","kind":"` + string(redpacket.Random) + `","total":100,"count":2,"greeting":"hi","status":"open",` +
		`"claimed_count":1,"claimed_amount":40,"refund":0,"created_at":1,"expires_at":2},"claims":[` + claim + `],"luckiest":` + claim + `}`
	if string(b) != want {
		t.Fatalf("wire form %s, want %s", b, want)
	}
	if strings.Contains(string(b), "60") {
		t.Fatal("the unclaimed share is in the wire form")
	}
	if b, _ := json.Marshal(redpacket.Books{Debited: 1, Claimed: 2, Refunded: 3, Open: 4, Credited: 5}); string(b) != `{"debited":1,"claimed":2,"refunded":3,"open":4,"credited":5}` {
		t.Fatalf("books: %s", b)
	}
}
