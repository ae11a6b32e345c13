package hotlist_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// dyadic weights: every sum of them is exact in float64, so window totals
// can be compared with ==.
func dyadic() map[hotlist.Kind]float64 {
	return map[hotlist.Kind]float64{hotlist.View: 0.25, hotlist.Like: 0.5, hotlist.Repost: 1, hotlist.Comment: 13.5}
}

// fixture drives a list through one claim per partition, as a consumer
// group would, with a model beside it.
type fixture struct {
	t      testing.TB
	l      *hotlist.List
	a      *hotlist.Aggregator
	clk    *testenv.Clock
	claims []*hotlist.Claim
	next   []int64 // next offset per partition
	m      *model
}

func newFixture(t testing.TB, r *testenv.Redis, cfg hotlist.Config) *fixture {
	t.Helper()
	// The next full hour: the first instant of a slot for every slot length
	// that divides an hour, whatever the time the test runs at, and ahead of
	// the Redis server's clock, so that no TTL set from it has passed.
	clk := testenv.NewClock(testenv.Now().Truncate(time.Hour).Add(time.Hour))
	cfg.Namespace, cfg.Now = r.Namespace, clk.Now
	if cfg.Name == "" {
		cfg.Name = "hot"
	}
	l, err := hotlist.New(r.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := hotlist.NewAggregator(l, hotlist.AggregatorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, l: l, a: a, clk: clk, next: make([]int64, cfg.Partitions), m: newModel(cfg)}
	for p := range cfg.Partitions {
		c, err := a.Claim(context.Background(), int32(p))
		if err != nil {
			t.Fatal(err)
		}
		f.claims = append(f.claims, c)
	}
	return f
}

// send delivers events as one batch per partition and records them in the
// model.
func (f *fixture) send(events ...hotlist.Event) {
	f.t.Helper()
	msgs, err := hotlist.EncodeMessages("t", len(f.claims), 0, events)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, m := range msgs {
		p := hotlist.PartitionOf(m.Key, len(f.claims))
		if err := f.claims[p].Add(f.next[p], m.Value); err != nil {
			f.t.Fatal(err)
		}
		f.next[p]++
	}
	f.m.add(f.clk.Now(), events...)
}

func (f *fixture) flush() {
	f.t.Helper()
	for _, c := range f.claims {
		if err := c.Flush(context.Background()); err != nil {
			f.t.Fatal(err)
		}
	}
}

// model is the naive reference: it keeps every event and computes each
// item's heat from scratch when asked.
type model struct {
	cfg    hotlist.Config
	events []hotlist.Event
	// seen de-duplicates likes per (dedup period, item, user).
	seen map[string]bool
}

func newModel(cfg hotlist.Config) *model {
	if cfg.Weights == nil {
		cfg.Weights = hotlist.DefaultWeights()
	}
	cfg.Model = cmp.Or(cfg.Model, hotlist.Decay)
	cfg.HalfLife = cmp.Or(cfg.HalfLife, time.Hour)
	cfg.Slots = cmp.Or(cfg.Slots, 12)
	cfg.SlotLength = cmp.Or(cfg.SlotLength, 5*time.Minute)
	if cfg.SlotWeights == nil {
		for range cfg.Slots {
			cfg.SlotWeights = append(cfg.SlotWeights, 1)
		}
	}
	if cfg.Model == hotlist.Window {
		cfg.DedupWindow = cmp.Or(cfg.DedupWindow, time.Duration(cfg.Slots)*cfg.SlotLength)
	}
	cfg.DedupWindow = cmp.Or(cfg.DedupWindow, 24*time.Hour)
	return &model{cfg: cfg, seen: map[string]bool{}}
}

// add records events as an aggregator whose clock reads now would count
// them: window events of slots already out of the ring are dropped.
func (m *model) add(now time.Time, events ...hotlist.Event) {
	for _, e := range events {
		if m.cfg.Model == hotlist.Window && m.slot(e.At) <= m.slot(now)-int64(m.cfg.Slots) {
			continue
		}
		if m.cfg.DedupLikes && e.Kind == hotlist.Like {
			key := fmt.Sprint(e.At.UnixMilli()/m.cfg.DedupWindow.Milliseconds(), "\x00", e.Item, "\x00", e.User)
			if m.seen[key] {
				continue
			}
			m.seen[key] = true
		}
		m.events = append(m.events, e)
	}
}

func (m *model) slot(t time.Time) int64 { return t.UnixMilli() / m.cfg.SlotLength.Milliseconds() }

// heats computes every item's heat at now from its events: under Decay the
// naive Σ w·2^(−age/half-life), recomputed in full; under Window the
// weighted sum over the live slots, slot by slot from the current one (the
// order the read script adds them in).
func (m *model) heats(now time.Time) map[string]float64 {
	out := map[string]float64{}
	switch m.cfg.Model {
	case hotlist.Decay:
		for _, e := range m.events {
			age := float64(now.Sub(e.At).Milliseconds()) / float64(m.cfg.HalfLife.Milliseconds())
			out[e.Item] += m.cfg.Weights[e.Kind] * math.Exp2(-age)
		}
	case hotlist.Window:
		perSlot := map[int64]map[string]float64{}
		for _, e := range m.events {
			s := m.slot(e.At)
			if perSlot[s] == nil {
				perSlot[s] = map[string]float64{}
			}
			perSlot[s][e.Item] += m.cfg.Weights[e.Kind]
		}
		cur := m.slot(now)
		for i, w := range m.cfg.SlotWeights {
			for item, v := range perSlot[cur-int64(i)] {
				out[item] += w * v
			}
		}
	}
	return out
}

// top is the model's list at now: hottest first, equal heats by greater
// name.
func (m *model) top(now time.Time, n int) []hotlist.Entry {
	var out []hotlist.Entry
	for item, h := range m.heats(now) {
		out = append(out, hotlist.Entry{Item: item, Heat: h})
	}
	slices.SortFunc(out, func(a, b hotlist.Entry) int {
		if a.Heat != b.Heat {
			return cmp.Compare(b.Heat, a.Heat)
		}
		return cmp.Compare(b.Item, a.Item)
	})
	out = out[:min(n, len(out))]
	for i := range out {
		out[i].Rank = i + 1
	}
	return out
}

// sameTop checks got against the model's top n at now: exactly (Window,
// dyadic weights), or under Decay each heat within 1e-9 of the model's,
// both the heat of the item named and the heat at that rank — so the order
// is the model's except among items whose heats agree to 1e-9.
func (f *fixture) sameTop(got []hotlist.Entry, n int) error {
	now := f.clk.Now()
	want := f.m.top(now, n)
	if len(got) != len(want) {
		return fmt.Errorf("%d entries, model has %d\n got %v\nwant %v", len(got), len(want), got, want)
	}
	heats := f.m.heats(now)
	for i, g := range got {
		w := want[i]
		if f.m.cfg.Model == hotlist.Window {
			if g.Item != w.Item || g.Heat != w.Heat || g.Rank != w.Rank {
				return fmt.Errorf("rank %d: got %+v, want %+v\n got %v\nwant %v", i+1, g, w, got, want)
			}
			continue
		}
		if g.Rank != i+1 || !near(g.Heat, heats[g.Item]) || !near(g.Heat, w.Heat) {
			return fmt.Errorf("rank %d: got %s %.17g (model %.17g), model's rank %d is %s %.17g", i+1, g.Item, g.Heat, heats[g.Item], i+1, w.Item, w.Heat)
		}
	}
	return nil
}

func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

func at(t time.Time, ms int) time.Time { return t.Add(time.Duration(ms) * time.Millisecond) }
