package redpacket_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/redpacket"
)

// skewed is a second app server on f's backends whose clock runs behind
// f's by lag.
func skewed(t *testing.T, f *fixture, r *testenv.Redis, lag time.Duration) *redpacket.Service {
	t.Helper()
	s, err := redpacket.New(r.Client, f.dbs, redpacket.Config{Namespace: f.r.Namespace, TablesPerDB: 2, Buckets: 16,
		Now: func() time.Time { return f.clk.Now().Add(-lag) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// told is what opens answered: packet → user → fen.
type told struct {
	mu sync.Mutex
	m  map[int64]map[string]int64
}

func (tl *told) add(packet int64, user string, fen int64) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.m == nil {
		tl.m = map[int64]map[string]int64{}
	}
	if tl.m[packet] == nil {
		tl.m[packet] = map[string]int64{}
	}
	tl.m[packet][user] = fen
}

// credited checks that every user told a share of a packet holds exactly
// that share in its ledger and got exactly the shares they were told.
func (tl *told) credited(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	wallets := map[string]int64{}
	for packet, users := range tl.m {
		cs, err := f.s.Claims(ctx, packet)
		if err != nil {
			t.Fatal(err)
		}
		ledger := map[string]int64{}
		for _, c := range cs {
			ledger[c.User] = c.Amount
		}
		for u, fen := range users {
			if ledger[u] != fen {
				t.Errorf("packet %d: %s was told %d fen, the ledger holds %d", packet, u, fen, ledger[u])
			}
			wallets[u] += fen
		}
	}
	for u, fen := range wallets {
		if bal, err := f.s.Balance(ctx, u); err != nil || bal != fen {
			t.Errorf("%s was told %d fen in all, holds %d: %v", u, fen, bal, err)
		}
	}
}

// holdPacketRow locks packet's row in SQL (a no-op UPDATE in an open
// transaction), so a refund of it waits at its own UPDATE; release ends
// the transaction.
func holdPacketRow(t *testing.T, f *fixture, packet int64) (release func()) {
	t.Helper()
	ctx := context.Background()
	for _, db := range f.dbs {
		list := `SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'rp_packets%' AND name NOT LIKE '%archive%'`
		if db.DriverName() == "mysql" {
			list = `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'rp_packets%' AND table_name NOT LIKE '%archive%'`
		}
		var tables []string
		if err := db.SelectContext(ctx, &tables, list); err != nil {
			t.Fatal(err)
		}
		for _, table := range tables {
			tx, err := db.BeginTxx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := tx.ExecContext(ctx, `UPDATE `+table+` SET greeting = greeting WHERE id = ?`, packet)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n == 1 || db.DriverName() == "mysql" && mysqlMatched(t, tx, table, packet) {
				return func() { tx.Rollback() }
			}
			tx.Rollback()
		}
	}
	t.Fatalf("packet %d has no row", packet)
	return nil
}

// mysqlMatched tells whether table holds packet (MySQL counts a no-op
// UPDATE's row as unchanged, not as affected).
func mysqlMatched(t *testing.T, tx *sqlx.Tx, table string, packet int64) bool {
	var n int
	if err := tx.Get(&n, `SELECT COUNT(*) FROM `+table+` WHERE id = ?`, packet); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestRefundClosesBeforeLateOpens: while a refund is on its way — held up
// at its SQL commit — a crowd opens the packet through an app server whose
// clock is 2 ms behind the refunder's, so it still takes the packet for
// open. The refund closed the packet in Redis before it decided: an open
// is either in the refund's reckoning or refused, and every user told a
// share is credited that share — no claim arrives after the refund.
func TestRefundClosesBeforeLateOpens(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	f := setup(t, r, redpacket.Config{})
	late := skewed(t, f, r, 2*time.Millisecond)
	st := newSettler(t, f)
	const packets, crowd = 4, 16
	var ps []redpacket.Packet
	var tl told
	for i := range packets {
		p := f.send(fmt.Sprint("s", i), 100_000, 50, redpacket.Random)
		ps = append(ps, p)
		for u := range 3 {
			user := fmt.Sprint("p", i, "u", u)
			v, err := late.Open(ctx, p.ID, user)
			if err != nil {
				t.Fatal(err)
			}
			tl.add(p.ID, user, v)
		}
	}
	st.settle(ctx)
	f.clk.Set(time.UnixMilli(ps[0].ExpiresAt)) // expired for f; 2 ms to go for late

	var won atomic.Int64
	for i, p := range ps {
		release := holdPacketRow(t, f, p.ID)
		refunded := make(chan error, 1)
		go func() {
			for {
				_, err := f.s.Refund(ctx, p.ID)
				if !errors.Is(err, redpacket.ErrFence) {
					refunded <- err
					return
				}
				st.settle(ctx) // claims that made it before the close
			}
		}()
		time.Sleep(200 * time.Millisecond) // the refund reaches its commit and waits
		var wg sync.WaitGroup
		for g := range crowd {
			wg.Go(func() {
				for k := range 2 {
					user := fmt.Sprint("p", i, "g", g, "k", k)
					v, err := late.Open(ctx, p.ID, user)
					switch {
					case err == nil:
						tl.add(p.ID, user, v)
						won.Add(1)
					case !errors.Is(err, redpacket.ErrExpired):
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		release()
		if err := <-refunded; err != nil {
			t.Fatal(err)
		}
		if _, err := late.Open(ctx, p.ID, "after"); !errors.Is(err, redpacket.ErrExpired) {
			t.Errorf("open after the refund: %v", err)
		}
	}
	st.settle(ctx)
	if st.late != 0 || st.bad != 0 {
		t.Errorf("%d claims arrived after their packet's refund, %d were refused", st.late, st.bad)
	}
	tl.credited(t, f)
	for _, p := range ps {
		got, err := f.s.Get(ctx, p.ID)
		var sum int64
		for _, v := range tl.m[p.ID] {
			sum += v
		}
		if err != nil || got.Status != redpacket.StatusRefunded || got.Refund != p.Total-sum {
			t.Errorf("packet %d: refund %d, want %d (%s): %v", p.ID, got.Refund, p.Total-sum, got.Status, err)
		}
	}
	f.balanced()
	t.Logf("%d of %d late opens were taken into the refunds' reckoning", won.Load(), packets*crowd*2)
}

// TestRefundCloseReplyLost: the refunder's reply to the close is lost and
// go-redis sends the close again; then every reply is lost and the refund
// fails. Either way the packet is closed before anything is decided — the
// skewed server's opens are refused from the first close on — and the
// refund, retried on a healed link, pays back exactly what nobody took.
func TestRefundCloseReplyLost(t *testing.T) {
	ctx := context.Background()
	fr, proxy := testenv.NewFaultyRedis(t)
	f := setup(t, fr, redpacket.Config{})
	direct := &testenv.Redis{Client: testenv.NewRedis(t).Client, Namespace: fr.Namespace, Kind: fr.Kind}
	late := skewed(t, f, direct, 2*time.Millisecond)
	st := newSettler(t, f)
	p := f.send("boss", 10_000, 10, redpacket.Random)
	var tl told
	for u := range 4 {
		user := fmt.Sprint("u", u)
		v, err := late.Open(ctx, p.ID, user)
		if err != nil {
			t.Fatal(err)
		}
		tl.add(p.ID, user, v)
		if u == 2 {
			st.settle(ctx) // u3's claim stays on its way: the refund waits for it
		}
	}
	f.clk.Set(time.UnixMilli(p.ExpiresAt))

	proxy.DropReplyTo(strconv.FormatInt(p.ID, 10), 1) // the close's reply, once: go-redis retries it
	if _, err := f.s.Refund(ctx, p.ID); !errors.Is(err, redpacket.ErrFence) {
		t.Fatalf("refund after one lost reply, a claim on its way: %v", err)
	}
	if proxy.Cuts() == 0 {
		t.Fatal("no reply was lost")
	}
	if _, err := late.Open(ctx, p.ID, "u9"); !errors.Is(err, redpacket.ErrExpired) {
		t.Fatalf("open after the close: %v", err)
	}
	if v, err := late.Open(ctx, p.ID, "u0"); err != nil || v != tl.m[p.ID]["u0"] {
		t.Fatalf("a holder reopening after the close: %d, %v", v, err)
	}
	st.settle(ctx)
	proxy.DropReplies(10) // more than go-redis retries
	if _, err := f.s.Refund(ctx, p.ID); err == nil {
		t.Fatal("a refund whose close got no reply went through")
	}
	proxy.DropReplies(0)
	if got, _ := f.s.Get(ctx, p.ID); got.Status != redpacket.StatusOpen {
		t.Fatalf("the failed refund changed the packet: %+v", got)
	}
	var claimed int64
	for _, v := range tl.m[p.ID] {
		claimed += v
	}
	for range 2 {
		if refund, err := f.s.Refund(ctx, p.ID); err != nil || refund != p.Total-claimed {
			t.Fatalf("refund %d, want %d: %v", refund, p.Total-claimed, err)
		}
	}
	st.settle(ctx)
	if st.late+st.bad != 0 {
		t.Fatalf("%d late, %d refused claims", st.late, st.bad)
	}
	tl.credited(t, f)
	f.balanced()
}
