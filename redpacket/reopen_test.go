package redpacket_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/redpacket"
)

// TestReopenAfterRestart: a redis-server without persistence restarts and
// forgets every packet. Reopen, run by several callers at once and again,
// reopens each live packet once — not the expired one, not the refunded
// one — with the claims SQL holds (a holder opening again gets their
// share) and only the shares SQL does not record as claimed; the crowd then
// takes exactly those, no claim is refused, and the books balance.
func TestReopenAfterRestart(t *testing.T) {
	ctx := context.Background()
	r, srv := testenv.NewPrivateRedis(t)
	f := setup(t, r, redpacket.Config{})
	st := newSettler(t, f)
	refunded := f.send("old", 1000, 4, redpacket.Random)
	expired := f.send("old", 1000, 4, redpacket.Random)
	f.clk.Add(24 * time.Hour)
	if _, err := f.s.Refund(ctx, refunded.ID); err != nil {
		t.Fatal(err)
	}
	f.clk.Add(time.Hour)
	live := []redpacket.Packet{f.send("a", 10_000, 10, redpacket.Random), f.send("b", 5_000, 5, redpacket.Fixed)}
	held := map[string]int64{}
	for u := range 4 {
		held[fmt.Sprint("u", u)] = openRetried(t, f.s, live[0].ID, fmt.Sprint("u", u))
	}
	st.settle(ctx)
	openRetried(t, f.s, live[0].ID, "lost1") // in Redis only: the restart loses them
	openRetried(t, f.s, live[1].ID, "lost2")

	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Grab(ctx, live[0].ID, "u9"); !errors.Is(err, redpacket.ErrNotFound) {
		t.Fatalf("after the restart: %v", err)
	}
	var reopened atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			n, err := f.s.Reopen(ctx)
			if err != nil {
				t.Error(err)
			}
			reopened.Add(int64(n))
		})
	}
	wg.Wait()
	if n, err := f.s.Reopen(ctx); reopened.Load() != 2 || n != 0 || err != nil {
		t.Fatalf("8 concurrent Reopens reopened %d packets, one more %d (%v); want 2, then 0", reopened.Load(), n, err)
	}
	for _, p := range []redpacket.Packet{refunded, expired} {
		if err := f.s.Grab(ctx, p.ID, "u9"); !errors.Is(err, redpacket.ErrNotFound) {
			t.Errorf("packet %d, expired or refunded, was reopened: %v", p.ID, err)
		}
	}
	for u, v := range held {
		if got, err := f.s.Open(ctx, live[0].ID, u); got != v || err != nil {
			t.Fatalf("%s held %d fen, opens %d: %v", u, v, got, err)
		}
	}
	var tl told
	for u, v := range held {
		tl.add(live[0].ID, u, v)
	}
	var wins atomic.Int64
	for _, p := range live {
		for g := range 8 {
			wg.Go(func() {
				for k := range 10 {
					user := fmt.Sprint("g", g, "k", k)
					v, err := f.s.Open(ctx, p.ID, user)
					switch {
					case err == nil:
						tl.add(p.ID, user, v)
						wins.Add(1)
					case !errors.Is(err, redpacket.ErrEmpty):
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	if want := int64(live[0].Count - len(held) + live[1].Count); wins.Load() != want {
		t.Fatalf("the crowd took %d shares after the reopen, want the %d SQL did not hold", wins.Load(), want)
	}
	st.settle(ctx)
	if st.late+st.bad != 0 {
		t.Fatalf("%d late and %d refused claims after the reopen", st.late, st.bad)
	}
	tl.credited(t, f)
	for _, p := range live {
		if got, _ := f.s.Get(ctx, p.ID); got.ClaimedAmount != p.Total {
			t.Fatalf("packet %d: %d of %d fen claimed", p.ID, got.ClaimedAmount, p.Total)
		}
	}
	f.clk.Add(25 * time.Hour)
	if _, fenced, err := f.s.RefundDue(ctx, 10); fenced != 0 || err != nil {
		t.Fatalf("refunds: %d fenced, %v", fenced, err)
	}
	if b := f.balanced(); b.Open != 0 {
		t.Fatalf("books %+v", b)
	}
}
