package redpacket_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/redpacket"
)

// settler relays a Service's claim outbox straight into Handle and sorts
// what Handle refuses.
type settler struct {
	t     testing.TB
	s     *redpacket.Service
	relay *outbox.Relay
	pub   *testenv.Published
	late  int // ErrLateClaim
	bad   int // ErrBadMessage
}

func newSettler(t testing.TB, f *fixture) *settler {
	pub := &testenv.Published{}
	return &settler{t: t, s: f.s, pub: pub, relay: outbox.NewRelay(f.r.Client, f.s.Outboxes(), "claims", pub)}
}

// settle relays what the outbox holds and handles it; anything but a poison
// message fails the test (settle may run in a goroutine of the test's).
func (st *settler) settle(ctx context.Context) {
	st.t.Helper()
	for i := 0; ; i++ {
		_, err := st.relay.DrainAll(ctx)
		if err == nil {
			break
		}
		if i == 100 {
			st.t.Errorf("relay: %v", err)
			return
		}
		time.Sleep(50 * time.Millisecond) // a cluster learning its new topology
	}
	for _, m := range st.pub.Take() {
		err := st.s.Handle(ctx, m.Key, m.Value)
		switch {
		case err == nil:
		case errors.Is(err, redpacket.ErrLateClaim):
			st.late++
		case errors.Is(err, redpacket.ErrBadMessage):
			st.bad++
		default:
			st.t.Errorf("handle %s: %v", m.Value, err)
		}
	}
}

// openRetried opens as a client does, again after an error (the cluster
// failing over), until it has an answer.
func openRetried(t testing.TB, s *redpacket.Service, packet int64, user string) int64 {
	t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		v, err := s.Open(ctx, packet, user)
		if err == nil {
			return v
		}
		if i == 200 {
			t.Fatalf("%s opening %d: %v", user, packet, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFailoverLateClaimsDoNotBlockRefund: the packet's primary is replaced
// by a replica that missed a claim which had already reached SQL. The lost
// claim's share goes to a new user (ErrLateClaim) and its user, opening
// again, is given another share (which the ledger refuses: the user holds
// one): Redis now counts more claims than SQL ever will. The refund is
// decided from the ledger all the same — every claim Redis holds is either
// in SQL or one SQL can never take — and the remainder goes back, so the
// books balance.
func TestFailoverLateClaimsDoNotBlockRefund(t *testing.T) {
	ctx := context.Background()
	r, cc := testenv.NewPrivateCluster(t)
	f := setup(t, r, redpacket.Config{})
	st := newSettler(t, f)
	p := f.send("boss", 10_000, 10, redpacket.Random)
	for u := range 3 {
		openRetried(t, f.s, p.ID, fmt.Sprint("u", u))
	}
	st.settle(ctx)

	sh := testenv.ShardOf(t, cc, f.s.Outboxes()[f.s.Bucket(p.ID)])
	sh.Cut(t)
	lost := openRetried(t, f.s, p.ID, "u3") // reaches SQL, not the replica
	st.settle(ctx)
	sh.Failover(t)

	if v := openRetried(t, f.s, p.ID, "u6"); v != lost {
		t.Fatalf("after the failover the next share is %d fen, want the lost one, %d", v, lost)
	}
	openRetried(t, f.s, p.ID, "u3") // another share: the ledger holds u3's first
	st.settle(ctx)
	if st.late != 1 || st.bad != 1 {
		t.Fatalf("%d late and %d conflicting claims, want 1 and 1", st.late, st.bad)
	}

	d, err := f.s.Detail(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	var claimed int64
	for _, c := range d.Claims {
		claimed += c.Amount
	}
	if len(d.Claims) != 4 {
		t.Fatalf("SQL holds %d claims, want 4", len(d.Claims))
	}
	f.clk.Add(24 * time.Hour)
	if n, fenced, err := f.s.RefundDue(ctx, 10); n != 1 || fenced != 0 || err != nil {
		t.Fatalf("refunded %d, fenced %d: %v", n, fenced, err)
	}
	if got, err := f.s.Get(ctx, p.ID); err != nil || got.Refund != p.Total-claimed {
		t.Fatalf("refund %d, want %d: %v", got.Refund, p.Total-claimed, err)
	}
	if b := f.balanced(); b.Open != 0 || b.Refunded != p.Total-claimed {
		t.Fatalf("books %+v", b)
	}
}
