package seckill

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// The record and message a batch gets when all its buyers are reserved,
// built by the caller for buy.lua, are the codecs' own: the formats that
// close.lua, Reconcile and HandleOrder read.
func TestAllReservedIsTheCodecsFormat(t *testing.T) {
	s := &Service{space: keys.NewSpace("t"), cfg: Config{RetryWindow: time.Second, PayTimeout: time.Minute, Now: testenv.Now}}
	sl := &Sale{s: s, c: Campaign{ID: "c1:double-11", Buckets: 4}}
	deadline := testenv.Now().Add(time.Minute).UnixMilli()
	for _, reqs := range [][]request{
		{{"alice", 1}},
		{{"alice", 1}, {"bob", 3}, {"carol@x.example", 12}},
		manyBuyers(257, "u"),
	} {
		var slots []slotRecord
		m := OrderMessage{Campaign: sl.c.ID}
		for i, r := range reqs {
			slots = append(slots, slotRecord{slot: i, user: r.user, qty: r.qty})
			m.Orders = append(m.Orders, Order{ID: sl.id(3, 42, i), User: r.user, Qty: r.qty, PayBy: time.UnixMilli(deadline)})
		}
		rec, msg := sl.allReserved(3, 42, deadline, reqs)
		if want := formatRecord(3, slots); string(rec) != want {
			t.Errorf("%d buyers: record %q, want %q", len(reqs), rec, want)
		}
		if want := string(EncodeOrderMessage(m)); string(msg) != want {
			t.Errorf("%d buyers: message %s, want %s", len(reqs), msg, want)
		}
		if got, err := DecodeOrderMessage(msg); err != nil || len(got.Orders) != len(reqs) {
			t.Errorf("%d buyers: message decodes to %d orders, %v", len(reqs), len(got.Orders), err)
		}
	}
}

func manyBuyers(n int, prefix string) []request {
	reqs := make([]request, n)
	for i := range reqs {
		reqs[i] = request{user: prefix + strconv.Itoa(i), qty: 1}
	}
	return reqs
}

// buy.lua writes the quotas, record and order message its answers say,
// whether the batch takes the caller's strings whole (every buyer new, once,
// and reserved) or cuts them (runs of reservations among other answers).
func TestBuyScriptWritesWhatItDecided(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	for i, c := range []struct {
		name    string
		stock   int64
		limit   int64
		buckets int
		before  map[string]int64 // quotas held before the batch
		reqs    []request
		want    string
	}{
		{"new buyers, all reserved", 1000, 1, 2, nil, manyBuyers(300, "u"), ""},
		{"one buyer", 5, 1, 1, nil, []request{{"alice", 1}}, "R"},
		{"several units", 5, 4, 1, nil, []request{{"alice", 3}, {"bob", 2}}, "RR"},
		{"a buyer twice", 5, 2, 1, nil, []request{{"alice", 1}, {"bob", 1}, {"alice", 1}, {"alice", 1}}, "RRRL"},
		{"a returning buyer", 5, 2, 1, map[string]int64{"bob": 1}, []request{{"alice", 1}, {"bob", 1}, {"carol", 1}}, "RRR"},
		{"over the limit", 5, 1, 1, map[string]int64{"bob": 1}, []request{{"alice", 1}, {"bob", 1}, {"carol", 1}}, "RLR"},
		{"sold out, only bucket", 2, 1, 1, nil, []request{{"alice", 1}, {"bob", 1}, {"carol", 1}}, "RRS"},
		{"bucket empty, others left", 2, 1, 2, nil, []request{{"alice", 1}, {"bob", 1}, {"carol", 1}}, "RRH"},
		{"nothing reserved", 0, 1, 1, nil, []request{{"alice", 1}}, "S"},
		{"held, then reserved", 2, 5, 2, nil, []request{{"alice", 3}, {"bob", 1}, {"carol", 1}}, "HRR"},
		{"runs", 3, 1, 1, map[string]int64{"u1": 1, "u3": 1, "u4": 1}, manyBuyers(7, "u"), "RLRLLRS"},
		{"runs past slot 100", 1000, 1, 1, map[string]int64{"u5": 1, "u150": 1, "u255": 1}, manyBuyers(256, "u"),
			strings.Repeat("R", 5) + "L" + strings.Repeat("R", 144) + "L" + strings.Repeat("R", 104) + "L"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &Service{rdb: r.Client, space: keys.NewSpace(r.Namespace),
				cfg: Config{RetryWindow: time.Second, PayTimeout: time.Minute, Now: testenv.Now}}
			sl := &Sale{s: s, c: Campaign{ID: "c" + strconv.Itoa(i), Limit: c.limit, Buckets: c.buckets}}
			const b, n = 1, 77
			if err := r.Client.Set(ctx, sl.key(b, "stock"), c.stock, 0).Err(); err != nil {
				t.Fatal(err)
			}
			for u, q := range c.before {
				r.Client.HSet(ctx, sl.key(b, "quota"), u, q)
			}
			keys, args := sl.buyCall(b, n, c.reqs)
			out, err := buyScript.Run(ctx, r.Client, keys, args...).Text()
			want := c.want
			if want == "" {
				want = string(slices.Repeat([]byte("R"), len(c.reqs)))
			}
			if err != nil || out != want {
				t.Fatalf("answers %q, %v; want %q", out, err, want)
			}

			quota := map[string]string{}
			for u, q := range c.before {
				quota[u] = strconv.FormatInt(q, 10)
			}
			var slots []slotRecord
			m := OrderMessage{Campaign: sl.c.ID}
			payBy := time.UnixMilli(args[1].(int64))
			var taken int64
			for i, r := range c.reqs {
				if out[i] != 'R' && out[i] != 'H' {
					continue
				}
				q, _ := strconv.ParseInt(quota[r.user], 10, 64)
				quota[r.user] = strconv.FormatInt(q+r.qty, 10)
				if out[i] == 'R' {
					taken += r.qty
					slots = append(slots, slotRecord{slot: i, user: r.user, qty: r.qty})
					m.Orders = append(m.Orders, Order{ID: sl.id(b, n, i), User: r.user, Qty: r.qty, PayBy: payBy})
				}
			}
			if got := r.Client.HGetAll(ctx, sl.key(b, "quota")).Val(); !maps.Equal(got, quota) {
				t.Errorf("quotas %v, want %v", got, quota)
			}
			if got := r.Client.Get(ctx, sl.key(b, "stock")).Val(); got != strconv.FormatInt(c.stock-taken, 10) {
				t.Errorf("stock %s, want %d", got, c.stock-taken)
			}
			rec := r.Client.HGet(ctx, sl.key(b, "res"), strconv.Itoa(n)).Val()
			entries := r.Client.XRange(ctx, sl.key(b, "outbox"), "-", "+").Val()
			if len(slots) == 0 {
				if rec != "" || len(entries) != 0 {
					t.Errorf("nothing reserved, yet record %q and %d outbox entries", rec, len(entries))
				}
				return
			}
			if want := formatRecord(b, slots); rec != want {
				t.Errorf("record %q, want %q", rec, want)
			}
			if len(entries) != 1 {
				t.Fatalf("%d outbox entries, want 1", len(entries))
			}
			if got, want := entries[0].Values["v"], string(EncodeOrderMessage(m)); got != want {
				t.Errorf("order message %s, want %s", got, want)
			}
			if due := r.Client.ZScore(ctx, sl.key(b, "due"), strconv.Itoa(n)).Val(); int64(due) != payBy.UnixMilli() {
				t.Errorf("deadline %v, want %d", due, payBy.UnixMilli())
			}
		})
	}
}
