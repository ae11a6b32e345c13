package redpacket_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/redpacket"
)

// The red packet's invariants after each fault, once it is healed and the
// block's own repairs (a Send retried by request id, opens retried, the
// relay re-sending what Handle refused) have run: every packet's claims and
// refund add up to its total to the fen, nobody holds two shares of one
// packet, receivers are credited exactly what was claimed, and the sender is
// debited once per packet.
func TestConformanceFaults(t *testing.T) {
	type fault struct {
		name    string
		on, off time.Duration
		arm     func(p *testenv.Proxy)
		felt    bool // the block must have seen errors or reset connections (not only latency or retried-away losses)
	}
	sqlFaults := []fault{
		{"sql latency", time.Hour, 0, func(p *testenv.Proxy) { p.Latency(15*time.Millisecond, 10*time.Millisecond) }, false},
		{"sql connections reset", 30 * time.Millisecond, 100 * time.Millisecond, (*testenv.Proxy).Reset, true},
		{"sql connections cut mid-transaction", time.Hour, 0, func(p *testenv.Proxy) { p.CutAfter(3000) }, true},
		{"sql commit replies lost", 40 * time.Millisecond, 40 * time.Millisecond, func(p *testenv.Proxy) { p.DropReplyTo("COMMIT", 2) }, true},
		{"sql black hole", 300 * time.Millisecond, 200 * time.Millisecond, (*testenv.Proxy).BlackHole, true},
	}
	for _, f := range sqlFaults {
		t.Run(f.name, func(t *testing.T) {
			sqlf := testenv.NewFaultySQL(t, 2) // databases of the case's own
			failed := conformanceCase(t, testenv.NewRedis(t), sqlf.DBs, sqlf.Direct, func(stop <-chan struct{}) { sqlf.Flap(stop, f.on, f.off, func() { f.arm(sqlf.Proxy) }) })
			if f.felt && failed == 0 && sqlf.Resets() == 0 {
				t.Fatal("no call failed and no connection was reset: the fault was not exercised")
			}
		})
	}
	redisFaults := []fault{
		{"redis replies lost", 20 * time.Millisecond, 20 * time.Millisecond, func(p *testenv.Proxy) { p.DropReplies(2) }, false},
		{"redis connections reset", 30 * time.Millisecond, 60 * time.Millisecond, (*testenv.Proxy).Reset, true},
	}
	for _, f := range redisFaults {
		t.Run(f.name, func(t *testing.T) {
			r, rp := testenv.NewFaultyRedis(t)
			dbs := testenv.NewSQLs(t, 2)
			failed := conformanceCase(t, r, dbs, dbs, func(stop <-chan struct{}) { rp.Flap(stop, f.on, f.off, func() { f.arm(rp) }) })
			if f.felt && failed == 0 && rp.Resets() == 0 || !f.felt && rp.Cuts() == 0 {
				t.Fatalf("%d calls failed, %d replies lost, %d connections reset: the fault was not exercised", failed, rp.Cuts(), rp.Resets())
			}
		})
	}
}

func conformanceCase(t *testing.T, r *testenv.Redis, dbs, direct []*sqlx.DB, fault func(stop <-chan struct{})) (failed int64) {
	ctx := context.Background()
	rt := testenv.NewRetrier(t)
	retry := rt.Do
	clk := testenv.NewClock(start)
	ns := r.Namespace
	open := func(dbs []*sqlx.DB) *redpacket.Service {
		s, err := redpacket.New(r.Client, dbs, redpacket.Config{Namespace: ns, TablesPerDB: 2, Buckets: 4, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	svc, audit := open(dbs), open(direct)
	if err := audit.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const sender = "boss"
	const packets, total, count, openers = 3, 1000, 10, 8
	if err := audit.Deposit(ctx, sender, packets*total); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var faulting sync.WaitGroup
	faulting.Go(func() { fault(stop) })
	heal := sync.OnceFunc(func() { close(stop); faulting.Wait() })
	t.Cleanup(heal) // a failed case leaves no fault running
	var sent []redpacket.Packet
	for i := range packets {
		var p redpacket.Packet
		retry("send", func(ctx context.Context) (err error) {
			p, err = svc.Send(ctx, redpacket.SendRequest{Sender: sender, RequestID: fmt.Sprint("p", i), Total: total, Count: count, Kind: redpacket.Random})
			return err
		}, nil)
		sent = append(sent, p)
	}
	var opening sync.WaitGroup
	for _, p := range sent {
		for u := range openers {
			opening.Go(func() {
				retry("open", func(ctx context.Context) error { _, err := svc.Open(ctx, p.ID, fmt.Sprint("u", u)); return err },
					func(err error) bool { return errors.Is(err, redpacket.ErrEmpty) })
			})
		}
	}
	opening.Wait()
	// The relay hands the claims to a broker (here: kept), and a consumer
	// handles each, retrying it until it is applied, as Kafka's would.
	claims := &testenv.Published{}
	relay := outbox.NewRelay(r.Client, svc.Outboxes(), "claims", claims)
	handle := func() {
		retry("relay", func(ctx context.Context) error { _, err := relay.DrainAll(ctx); return err }, nil)
		for _, m := range claims.Take() {
			retry("handle a claim", func(ctx context.Context) error { return svc.Handle(ctx, m.Key, m.Value) }, nil)
		}
	}
	handle()
	heal()
	handle() // on a healthy link: anything the relay still held
	if n, err := relay.Pending(ctx); err != nil || n != 0 {
		t.Fatalf("%d claims pending after healing: %v", n, err)
	}
	clk.Add(25 * time.Hour)
	retry("refunds", func(ctx context.Context) error {
		refunded, fenced, err := svc.RefundDue(ctx, 100)
		if err == nil && (refunded > 0 || fenced > 0) {
			err = fmt.Errorf("%d refunded, %d behind the fence: again", refunded, fenced)
		}
		return err
	}, nil)

	books, err := audit.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if books.Debited != packets*total || books.Claimed+books.Refunded != books.Debited || books.Open != 0 || books.Credited != books.Claimed {
		t.Fatalf("books of this case: %+v; want %d debited = claimed + refunded, nothing open, credited = claimed", books, packets*total)
	}
	for _, p := range sent {
		d, err := audit.Detail(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		seen, sum := map[string]bool{}, int64(0)
		for _, c := range d.Claims {
			if seen[c.User] {
				t.Fatalf("packet %d: %s holds two shares", p.ID, c.User)
			}
			seen[c.User] = true
			sum += c.Amount
		}
		if len(d.Claims) != openers || d.Packet.ClaimedAmount != sum || d.Packet.Status != redpacket.StatusRefunded || sum+d.Packet.Refund != total {
			t.Fatalf("packet %d: %d claims summing %d, ledger %+v; want %d claims and claims + refund = %d", p.ID, len(d.Claims), sum, d.Packet, openers, total)
		}
	}
	if bal, err := audit.Balance(ctx, sender); err != nil || bal != books.Refunded {
		t.Fatalf("the sender holds %d (%v), want exactly the refunds %d: debited once per packet", bal, err, books.Refunded)
	}
	return rt.Failed()
}
