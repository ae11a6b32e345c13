package redpacket_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/redpacket"
)

// TestClaimBatches: the opens one call makes on a packet travel as one
// message of their claims (format 2). It is recorded and credited once
// however often it comes, alone or overlapping another batch; a claim the
// ledger contradicts is poison without holding back the good claims of its
// batch; a malformed batch is poison and changes nothing; and the refund
// fence counts batched claims one by one.
func TestClaimBatches(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), redpacket.Config{})
	p := f.send("boss", 1000, 10, redpacket.Random)
	pub := &testenv.Published{}
	relay := outbox.NewRelay(f.r.Client, f.s.Outboxes(), "claims", pub)
	open := func(users ...string) redpacket.ClaimMessage {
		t.Helper()
		var reqs []redpacket.OpenRequest
		for _, u := range users {
			reqs = append(reqs, redpacket.OpenRequest{Packet: p.ID, User: u}, redpacket.OpenRequest{Packet: p.ID, User: u})
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
		if len(msgs) != 1 || string(msgs[0].Key) != strconv.FormatInt(p.ID, 10) {
			t.Fatalf("%d opens of one call relayed as %d messages (%v), want one keyed by the packet", len(users), len(msgs), msgs)
		}
		m, err := redpacket.DecodeClaim(msgs[0].Value)
		if err != nil || m.V != 2 || len(m.Claims) != len(users) {
			t.Fatalf("message %s: %+v, %v", msgs[0].Value, m, err)
		}
		return m
	}
	handle := func(m redpacket.ClaimMessage) error {
		b, _ := json.Marshal(m)
		return f.s.Handle(ctx, nil, b)
	}
	sum := func(cs ...redpacket.ClaimedShare) (n int64) {
		for _, c := range cs {
			n += c.Amount
		}
		return n
	}
	want := func(claimed int64, what string) {
		t.Helper()
		if b := f.balanced(); b.Claimed != claimed {
			t.Fatalf("%s: claimed %d, want %d", what, b.Claimed, claimed)
		}
	}

	a := open("u0", "u1", "u2", "u3", "u4", `q"u\ote`)
	for range 2 {
		if err := handle(a); err != nil {
			t.Fatal(err)
		}
		want(sum(a.Claims...), "a batch, then its replay")
	}
	b := open("u6", "u7", "u8")
	overlap := redpacket.ClaimMessage{V: 2, Packet: p.ID, At: b.At, Claims: append(a.Claims[:2:2], b.Claims[0])}
	if err := handle(overlap); err != nil {
		t.Fatal(err)
	}
	want(sum(a.Claims...)+b.Claims[0].Amount, "a batch overlapping one recorded")

	// u0 told with another amount is a conflict, not a redelivery; u7's
	// claim beside it is recorded and credited all the same.
	conflict := a.Claims[0]
	conflict.Amount++
	err := handle(redpacket.ClaimMessage{V: 2, Packet: p.ID, At: b.At, Claims: []redpacket.ClaimedShare{conflict, b.Claims[1]}})
	if !errors.Is(err, outbox.ErrPoison) || !errors.Is(err, redpacket.ErrBadMessage) {
		t.Fatalf("a batch with a conflicting claim: %v", err)
	}
	want(sum(a.Claims...)+sum(b.Claims[:2]...), "a conflicting claim beside a good one")
	// u3's share told as someone else's: late, poison, nothing recorded.
	stolen := a.Claims[3]
	stolen.User = "zed"
	err = handle(redpacket.ClaimMessage{V: 2, Packet: p.ID, At: b.At, Claims: []redpacket.ClaimedShare{stolen}})
	if !errors.Is(err, outbox.ErrPoison) || !errors.Is(err, redpacket.ErrLateClaim) {
		t.Fatalf("a share claimed by another user: %v", err)
	}
	want(sum(a.Claims...)+sum(b.Claims[:2]...), "a stolen share")

	c0 := `{"user":"u9","amount":1,"index":10}`
	malformed := []string{
		fmt.Sprintf(`{"v":2,"packet":%d,"at":1,"claims":[%s,{"user":"u9","amount":2,"index":9}]}`, p.ID, c0),   // one user twice
		fmt.Sprintf(`{"v":2,"packet":%d,"at":1,"claims":[%s,{"user":"u10","amount":2,"index":10}]}`, p.ID, c0), // one share twice
		fmt.Sprintf(`{"v":2,"packet":%d,"at":1,"claims":[]}`, p.ID),
		fmt.Sprintf(`{"v":2,"packet":%d,"at":1}`, p.ID),
		fmt.Sprintf(`{"v":2,"packet":%d,"at":1,"claims":[%s,{"user":"u10","amount":0,"index":9}]}`, p.ID, c0),
		fmt.Sprintf(`{"v":2,"packet":%d,"at":1,"claims":[{"user":"u9","amount":1,"index":10,"x":1}]}`, p.ID),
		fmt.Sprintf(`{"v":2,"packet":%d,"at":1,"claims":[{"user":"u 9","amount":1,"index":10}]}`, p.ID),
		fmt.Sprintf(`{"v":2,"packet":%d,"at":1,"claims":[%s]}]`, p.ID, c0),
		fmt.Sprintf(`{"v":2,"packet":%d,"at":1,"claims":[%s],"user":"u9"}`, p.ID, c0),
		fmt.Sprintf(`{"v":2,"packet":%d,"at":1,"claims":[%s]}`, p.ID, strings.Repeat(c0+",", redpacket.OpensPerCall)+c0),
		`{"v":2,"packet":0,"at":1,"claims":[{"user":"u9","amount":1,"index":10}]}`,
		fmt.Sprintf(`{"v":3,"packet":%d,"at":1,"claims":[%s]}`, p.ID, c0),
	}
	for _, m := range malformed {
		if err := f.s.Handle(ctx, nil, []byte(m)); !errors.Is(err, outbox.ErrPoison) || !errors.Is(err, redpacket.ErrBadMessage) {
			t.Errorf("%s: %v", m, err)
		}
	}
	want(sum(a.Claims...)+sum(b.Claims[:2]...), "malformed batches")

	// The last share is opened; past the expiry the refund waits for every
	// claim Redis accepted, then refunds nothing.
	last := open("u9")
	f.clk.Add(24 * time.Hour)
	if _, err := f.s.Refund(ctx, p.ID); !errors.Is(err, redpacket.ErrFence) {
		t.Fatalf("refund with two claims in Redis only: %v", err)
	}
	if err := handle(b); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Refund(ctx, p.ID); !errors.Is(err, redpacket.ErrFence) {
		t.Fatalf("refund with one claim in Redis only: %v", err)
	}
	if err := handle(last); err != nil {
		t.Fatal(err)
	}
	if refund, err := f.s.Refund(ctx, p.ID); err != nil || refund != 0 {
		t.Fatalf("refund of a packet claimed whole: %d, %v", refund, err)
	}
	want(1000, "every share")
	for _, u := range []string{"u0", `q"u\ote`, "u8", "u9"} {
		if bal, _ := f.s.Balance(ctx, u); bal == 0 {
			t.Errorf("%s was not credited", u)
		}
	}
}

// TestOpenManyMixedCall: one script call on one bucket with every outcome —
// new claims, a repeat, an empty packet, a packet for someone else, no such
// packet — answers each open, and the call appends one message per packet
// it claimed from. The same call again (a lost reply) answers the same and
// appends nothing.
func TestOpenManyMixedCall(t *testing.T) {
	ctx := context.Background()
	f := setup(t, testenv.NewRedis(t), redpacket.Config{})
	// Two packets in one bucket (a packet's bucket follows its sender), so
	// their opens go in one call, and a packet id in it never sent.
	two := f.send("s", 100, 2, redpacket.Random)
	var one redpacket.Packet
	for i := 0; one.ID == 0 || f.s.Bucket(one.ID) != f.s.Bucket(two.ID); i++ {
		if i == 1000 {
			t.Fatal("no sender found in the bucket")
		}
		sender := fmt.Sprint("r", i)
		if err := f.s.Deposit(ctx, sender, 1); err != nil {
			t.Fatal(err)
		}
		var err error
		if one, err = f.s.Send(ctx, redpacket.SendRequest{Sender: sender, RequestID: "r", Total: 1, Count: 1, Recipient: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	ghost := two.ID + 1<<40 // 1<<40 is a multiple of the buckets
	reqs := []redpacket.OpenRequest{{two.ID, "u1"}, {one.ID, "x"}, {two.ID, "u2"}, {ghost, "u1"}, {two.ID, "u3"}, {one.ID, "r"}, {two.ID, "u1"}}
	var first []redpacket.OpenResult
	pub := &testenv.Published{}
	relay := outbox.NewRelay(f.r.Client, f.s.Outboxes(), "claims", pub)
	for round := range 2 {
		got := f.s.OpenMany(ctx, reqs)
		errs := []error{nil, redpacket.ErrNotRecipient, nil, redpacket.ErrNotFound, redpacket.ErrEmpty, nil, nil}
		for i, r := range got {
			if !errors.Is(r.Err, errs[i]) || (errs[i] == nil) != (r.Amount > 0) {
				t.Fatalf("round %d, open %+v: %d, %v; want %v", round, reqs[i], r.Amount, r.Err, errs[i])
			}
		}
		if got[0].Amount != got[6].Amount || got[0].Amount+got[2].Amount != 100 || got[5].Amount != 1 {
			t.Fatalf("round %d: %+v", round, got)
		}
		if round == 1 && !slices.EqualFunc(got, first, func(a, b redpacket.OpenResult) bool {
			return a.Amount == b.Amount && fmt.Sprint(a.Err) == fmt.Sprint(b.Err)
		}) {
			t.Fatalf("again: %+v, first %+v", got, first)
		}
		first = got
		if _, err := relay.DrainAll(ctx); err != nil {
			t.Fatal(err)
		}
		msgs := pub.Take()
		if want := 2 * (1 - round); len(msgs) != want {
			t.Fatalf("round %d appended %d messages, want %d", round, len(msgs), want)
		}
		for _, m := range msgs {
			if err := f.s.Handle(ctx, nil, m.Value); err != nil {
				t.Fatal(err)
			}
		}
	}
	if b := f.balanced(); b.Claimed != 101 {
		t.Fatalf("claimed %d, want 101", b.Claimed)
	}
}
