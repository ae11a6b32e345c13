package hotlist_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// A sliding window of weighted slots gives exactly the model's totals and
// order, as the clock carries slots out of the ring and events arrive late
// (some too late to count) or slightly early.
func TestWindowMatchesModel(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		f := newFixture(t, r, hotlist.Config{Partitions: 3, Model: hotlist.Window, Weights: dyadic(),
			Slots: 4, SlotLength: time.Minute, SlotWeights: []float64{1, 0.5, 0.5, 0.25}})
		rng := rand.New(rand.NewPCG(9, 10))
		for round := range 40 {
			var events []hotlist.Event
			for range 40 {
				events = append(events, randomEvent(rng, 120, f.clk.Now(), -5*60_000, 30_000))
			}
			f.send(events...)
			f.flush()
			for _, n := range []int{1, 7, 120} {
				top, err := f.l.Top(ctx, n)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.sameTop(top, n); err != nil {
					t.Fatalf("round %d, top %d: %v", round, n, err)
				}
			}
			f.clk.Add(time.Duration(rng.IntN(40_000)) * time.Millisecond)
		}
		if st := f.a.Stats(); st.Expired == 0 || st.Rejected != 0 || st.Events+st.Expired != 40*40 {
			t.Fatalf("stats %+v: expected some of the 1600 events too late for the window", st)
		}
	})
}

// An event counts until the instant its slot leaves the ring, not a
// millisecond longer — whether readers sum the slots (no flush since) or
// read the heat set flushes build for each slot; its slot's key expires a
// slot after that, by TTL.
func TestWindowBoundaries(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	for _, flushing := range []bool{false, true} {
		cfg := hotlist.Config{Name: "b-" + strconv.FormatBool(flushing), Partitions: 1, Model: hotlist.Window, Weights: dyadic(),
			Slots: 3, SlotLength: time.Minute, SlotWeights: []float64{1, 0.5, 0.25}}
		f := newFixture(t, r, cfg)
		start := f.clk.Now() // a slot boundary: the fixture's clock starts on the hour
		heat := func(item string) float64 {
			t.Helper()
			if flushing {
				f.flush()
			}
			for _, e := range mustTop(t, f.l, 10) {
				if e.Item == item {
					return e.Heat
				}
			}
			return 0
		}
		f.clk.Set(at(start, 30_000))
		f.send(hotlist.Event{Item: "a", Kind: hotlist.Repost, At: at(start, 0)},
			hotlist.Event{Item: "a", Kind: hotlist.Repost, At: at(start, 59_999)})
		f.flush()
		for _, c := range []struct {
			ms   int
			want float64
		}{
			{30_000, 2}, {59_999, 2}, // the current slot weighs 1
			{60_000, 1}, {119_999, 1}, // one slot back: 0.5
			{120_000, 0.5}, {179_999, 0.5}, // the oldest live slot: 0.25
			{180_000, 0}, // out of the ring
		} {
			f.clk.Set(at(start, c.ms))
			if got := heat("a"); got != c.want {
				t.Fatalf("flushing %v, at +%d ms: heat %v, want %v", flushing, c.ms, got, c.want)
			}
		}
		if flushing && metaField2(r, cfg.Name, "epoch") != strconv.FormatInt(start.UnixMilli()/60_000+3, 10) {
			t.Fatalf("the heat set in use is slot %s's", metaField2(r, cfg.Name, "epoch"))
		}
		// Arriving after its slot left the ring, an event is not applied.
		f.send(hotlist.Event{Item: "a", Kind: hotlist.Comment, At: at(start, 59_999)})
		f.flush()
		if st := f.a.Stats(); st.Expired != 1 || heat("a") != 0 {
			t.Fatalf("a late event: stats %+v, heat %v", st, heat("a"))
		}
		slot := start.UnixMilli() / 60_000
		key := r.Namespace + ":{" + cfg.Name + ":0}:slot:" + strconv.FormatInt(slot, 10)
		exp := r.Client.PExpireTime(ctx, key).Val()
		// miniredis keeps a time to live, not the instant PEXPIREAT named,
		// so it answers a few ms off; Redis answers the instant.
		slack := time.Duration(0)
		if r.Kind == devstack.Miniredis {
			slack = time.Second
		}
		if want := time.Duration(slot+4) * time.Minute; (exp - want).Abs() > slack {
			t.Fatalf("%s expires at %v, want %v (a slot after it leaves the ring)", key, exp, want)
		}
	}
}

func metaField2(r *testenv.Redis, name, field string) string {
	return r.Client.HGet(context.Background(), r.Namespace+":{"+name+":0}:meta", field).Val()
}

// An item warm in every slot can beat items that are hot in one: the read
// must find it although it tops no slot (the threshold loop reads deeper).
func TestWindowTopFindsItemsSpreadOverSlots(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	f := newFixture(t, r, hotlist.Config{Partitions: 1, Model: hotlist.Window, Weights: dyadic(), Slots: 4, SlotLength: time.Minute})
	start := f.clk.Now()
	f.clk.Set(at(start, 3*60_000))
	var events []hotlist.Event
	for s := range 4 {
		events = append(events, hotlist.Event{Item: "steady", Kind: hotlist.Repost, At: at(start, s*60_000)})
		for i := range 30 {
			for range 3 {
				events = append(events, hotlist.Event{Item: "spike-" + strconv.Itoa(s) + "-" + strconv.Itoa(i), Kind: hotlist.Repost, At: at(start, s*60_000)})
			}
		}
	}
	events = append(events, hotlist.Event{Item: "steady", Kind: hotlist.View, At: at(start, 0)})
	f.send(events...)
	f.flush()
	top, err := f.l.Top(ctx, 1)
	if err != nil || len(top) != 1 || top[0].Item != "steady" || top[0].Heat != 4.25 {
		t.Fatalf("top 1 = %v, %v; want steady with 4.25", top, err)
	}
	if err := f.sameTop(mustTop(t, f.l, 121), 121); err != nil {
		t.Fatal(err)
	}
}

func mustTop(t *testing.T, l *hotlist.List, n int) []hotlist.Entry {
	t.Helper()
	top, err := l.Top(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	return top
}
