package rank_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/rank"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// epoch is yesterday's midnight (UTC) on the test clock: tests write after
// it, and packed boards live 30 days from it by default.
var epoch = testenv.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)

const maxScore = 1<<53 - 1

func newBoard(t testing.TB, r *testenv.Redis, name string, shards int, now func() time.Time) *rank.Board {
	t.Helper()
	return newBoardWith(t, r, rank.Config{Name: name, Shards: shards, Epoch: epoch, Now: now})
}

func newBoardWith(t testing.TB, r *testenv.Redis, cfg rank.Config) *rank.Board {
	t.Helper()
	cfg.Namespace = r.Namespace
	b, err := rank.New(r.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// model is the reference: a plain map, sorted on demand.
type model struct {
	order rank.Order
	max   int64 // scores allowed: ±max (packed boards: 0..max)
	min   int64
	score map[string]int64
	tick  map[string]int64
}

func newModel(order rank.Order) *model {
	return &model{order: order, max: maxScore, min: -maxScore, score: map[string]int64{}, tick: map[string]int64{}}
}

// better reports whether score a ranks before score b.
func (m *model) better(a, b int64) bool {
	if m.order == rank.Ascending {
		return a < b
	}
	return a > b
}

func (m *model) apply(op string, member string, v, tick int64) {
	cur, ok := m.score[member]
	next := v
	switch op {
	case "add":
		next = cur + v
	case "best":
		if ok && !m.better(v, cur) {
			next = cur
		}
	case "remove":
		delete(m.score, member)
		delete(m.tick, member)
		return
	}
	if next < m.min || next > m.max {
		return
	}
	if !ok || next != cur {
		m.score[member], m.tick[member] = next, tick
	}
}

// sorted is the board in rank order, numbered as ties says.
func (m *model) sorted(ties rank.Ties) []rank.Entry {
	var out []rank.Entry
	for mem, s := range m.score {
		out = append(out, rank.Entry{Member: mem, Score: s, At: epoch.Add(time.Duration(m.tick[mem]) * time.Millisecond)})
	}
	slices.SortFunc(out, func(a, b rank.Entry) int {
		switch {
		case a.Score != b.Score:
			if m.better(a.Score, b.Score) {
				return -1
			}
			return 1
		case !a.At.Equal(b.At):
			return a.At.Compare(b.At) // earlier first
		case a.Member != b.Member:
			if a.Member > b.Member {
				return -1
			}
			return 1
		}
		return 0
	})
	for i := range out {
		switch {
		case i > 0 && ties != rank.Ordinal && out[i].Score == out[i-1].Score:
			out[i].Rank = out[i-1].Rank
		case i > 0 && ties == rank.Dense:
			out[i].Rank = out[i-1].Rank + 1
		default:
			out[i].Rank = int64(i + 1)
		}
	}
	return out
}

func same(a, b []rank.Entry) bool {
	return slices.EqualFunc(a, b, func(x, y rank.Entry) bool {
		return x.Member == y.Member && x.Score == y.Score && x.Rank == y.Rank && x.At.Equal(y.At)
	})
}

// randomValue is a score or a delta: mostly a few small values (many ties),
// sometimes one at or near either end of the range.
func randomValue(rng *rand.Rand) int64 {
	switch rng.IntN(10) {
	case 0:
		return maxScore - rng.Int64N(3)
	case 1:
		return -maxScore + rng.Int64N(3)
	case 2:
		return -rng.Int64N(12)
	}
	return rng.Int64N(12)
}

// TestAgainstModel drives random operations — with many equal scores, many
// writes within one millisecond and scores across the whole range, ±(2^53−1)
// included — into boards of both orders over 1, 7 and 64 shards and a
// reference model, and checks that all agree on Top, Rank, Around and Page
// in every Ties mode, and on Range and RankIn (range_test.go).
func TestAgainstModel(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		for _, order := range []rank.Order{rank.Descending, rank.Ascending} {
			clk := testenv.NewClock(epoch.Add(time.Hour))
			// Ties change only how ranks are counted: one stored board per
			// shard count, read through a Board of each mode.
			var writers []*rank.Board
			views := map[rank.Ties][]*rank.Board{}
			for _, n := range []int{1, 7, 64} {
				name := fmt.Sprintf("prop%d-%d", order, n)
				for _, ties := range []rank.Ties{rank.Ordinal, rank.Competition, rank.Dense} {
					b := newBoardWith(t, r, rank.Config{Name: name, Shards: n, Order: order, Ties: ties, Now: clk.Now})
					if ties == rank.Ordinal {
						writers = append(writers, b)
					}
					views[ties] = append(views[ties], b)
				}
			}
			m := newModel(order)
			rng := rand.New(rand.NewPCG(7, uint64(11+order)))
			for round := range 20 {
				for range 40 {
					member := fmt.Sprintf("p%02d", rng.IntN(60))
					ops := []string{"set", "add", "best", "remove", "add"}
					op := ops[rng.IntN(len(ops))]
					v := randomValue(rng)
					tick := clk.Now().Sub(epoch).Milliseconds()
					m.apply(op, member, v, tick)
					for _, b := range writers {
						var err error
						switch op {
						case "set":
							_, err = b.Set(ctx, member, v)
						case "add":
							_, err = b.Add(ctx, member, v)
						case "best":
							_, err = b.Best(ctx, member, v)
						case "remove":
							err = b.Remove(ctx, member)
						}
						if err != nil && !errors.Is(err, rank.ErrScoreRange) {
							t.Fatal(err)
						}
					}
					clk.Add(time.Duration(rng.IntN(2)) * time.Millisecond) // half the writes share a tick
				}
				for ties, bs := range views {
					want := m.sorted(ties)
					for _, b := range bs {
						what := fmt.Sprintf("round %d, order %d, ties %d", round, order, ties)
						checkBoard(t, ctx, b, want, rng, what)
						checkQueries(t, ctx, b, m, ties, rng, what)
						checkRanges(t, ctx, b, want, rng, what)
					}
				}
			}
		}
	})
}

// checkQueries compares RankOfScore, CountInRange and Percentile with the
// model, at scores of members and at random ones.
func checkQueries(t *testing.T, ctx context.Context, b *rank.Board, m *model, ties rank.Ties, rng *rand.Rand, what string) {
	t.Helper()
	what += fmt.Sprintf(", %d shards", len(b.Keys()))
	var scores []int64
	var members []string
	for member, s := range m.score {
		scores = append(scores, s)
		members = append(members, member)
	}
	slices.Sort(scores) // map order is random: keep the test repeatable
	slices.Sort(members)
	pick := func() int64 {
		if len(scores) > 0 && rng.IntN(3) > 0 {
			return scores[rng.IntN(len(scores))]
		}
		return randomValue(rng)
	}
	for range 3 {
		s := pick()
		better, distinct := int64(0), map[int64]bool{}
		for _, x := range scores {
			if m.better(x, s) {
				better++
				distinct[x] = true
			}
		}
		want := 1 + better
		if ties == rank.Dense {
			want = 1 + int64(len(distinct))
		}
		if got, err := b.RankOfScore(ctx, s); err != nil || got != want {
			t.Fatalf("%s: RankOfScore(%d) = %d, %v; want %d", what, s, got, err, want)
		}
		lo, hi := min(s, pick()), max(s, pick())
		var in int64
		for _, x := range scores {
			if lo <= x && x <= hi {
				in++
			}
		}
		if got, err := b.CountInRange(ctx, lo, hi); err != nil || got != in {
			t.Fatalf("%s: CountInRange(%d, %d) = %d, %v; want %d", what, lo, hi, got, err, in)
		}
	}
	if len(members) > 0 {
		member := members[rng.IntN(len(members))]
		s := m.score[member]
		worse := 0
		for _, x := range scores {
			if m.better(s, x) {
				worse++
			}
		}
		if got, err := b.Percentile(ctx, member); err != nil || got != 100*float64(worse)/float64(len(scores)) {
			t.Fatalf("%s: Percentile(%s) = %v, %v; want %d of %d", what, member, got, err, worse, len(scores))
		}
	}
}

// window is podium's around-me page: 2k+1 entries centred on the member at
// index i, shifted inwards at either end of the board.
func window(sorted []rank.Entry, i, k int) []rank.Entry {
	start := max(0, min(i-k, len(sorted)-1-2*k))
	return sorted[start:min(len(sorted), start+2*k+1)]
}

func checkBoard(t *testing.T, ctx context.Context, b *rank.Board, want []rank.Entry, rng *rand.Rand, what string) {
	t.Helper()
	what += fmt.Sprintf(", %d shards", len(b.Keys()))
	top, err := b.Top(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !same(top, want[:min(10, len(want))]) {
		t.Fatalf("%s: top 10\n got %v\nwant %v", what, top, want[:min(10, len(want))])
	}
	if size, _ := b.Size(ctx); size != int64(len(want)) {
		t.Fatalf("size %d, want %d", size, len(want))
	}
	for range 5 {
		if len(want) == 0 {
			break
		}
		i := rng.IntN(len(want))
		w := want[i]
		got, err := b.Rank(ctx, w.Member)
		if err != nil || !same([]rank.Entry{got}, []rank.Entry{w}) {
			t.Fatalf("%s: Rank(%s) = %+v, %v; want %+v", what, w.Member, got, err, w)
		}
		k := rng.IntN(5)
		around, err := b.Around(ctx, w.Member, k)
		if exp := window(want, i, k); err != nil || !same(around, exp) {
			t.Fatalf("%s: Around(%s, %d)\n got %v\nwant %v (%v)", what, w.Member, k, around, exp, err)
		}
	}
	var paged []rank.Entry
	cursor := ""
	for {
		page, next, err := b.Page(ctx, cursor, 7)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, page...)
		if next == "" {
			break
		}
		cursor = next
	}
	if !same(paged, want) {
		t.Fatalf("%s: paging gave %d entries\n got %v\nwant %v", what, len(paged), paged, want)
	}
}

// Around keeps its window 2k+1 long at either end of the board, shifted
// inwards (around the first member with k = 10: ranks 1 to 21), and returns a
// board shorter than that whole — on one shard and many, with members tied
// at one value across shards.
func TestAroundShiftsInwardAtTheEnds(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		clk := testenv.NewClock(epoch.Add(time.Hour))
		m := newModel(rank.Descending)
		var boards []*rank.Board
		for _, n := range []int{1, 7, 64} {
			boards = append(boards, newBoard(t, r, fmt.Sprintf("edges%d", n), n, clk.Now))
		}
		for size := range 31 {
			member := fmt.Sprintf("e%02d", size)
			score := int64(size % 4) // a few scores, many members each
			if size%3 == 0 {
				clk.Add(time.Millisecond) // the others tie at their score: same value
			}
			m.apply("set", member, score, clk.Now().Sub(epoch).Milliseconds())
			for _, b := range boards {
				if _, err := b.Set(ctx, member, score); err != nil {
					t.Fatal(err)
				}
			}
			if size != 4 && size != 30 {
				continue
			}
			want := m.sorted(rank.Ordinal)
			for _, b := range boards {
				for _, w := range want {
					for _, k := range []int{0, 1, 2, 10, 20} {
						got, err := b.Around(ctx, w.Member, k)
						if exp := window(want, int(w.Rank)-1, k); err != nil || !same(got, exp) {
							t.Fatalf("%d members, %d shards: Around(%s, %d)\n got %v\nwant %v (%v)", len(want), len(b.Keys()), w.Member, k, got, exp, err)
						}
					}
				}
			}
		}
		first, err := boards[2].Around(ctx, m.sorted(rank.Ordinal)[0].Member, 10)
		if err != nil || len(first) != 21 || first[0].Rank != 1 || first[20].Rank != 21 {
			t.Fatalf("around the first with k = 10: %d entries, %v", len(first), err)
		}
	})
}

// When one shard holds a whole neighbourhood — the top 16 all hash to it —
// the few entries a sharded read asks each shard for are not enough, and the
// shards whose entries made the cut are read again: Top, Page and Around
// still match a single sorted set.
func TestShardedReadsWhenOneShardHoldsTheNeighbourhood(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(epoch.Add(time.Hour))
	b := newBoard(t, r, "lopsided", 64, clk.Now)
	m := newModel(rank.Descending)
	set := func(member string, score int64) {
		m.apply("set", member, score, clk.Now().Sub(epoch).Milliseconds())
		if _, err := b.Set(ctx, member, score); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1000 {
		set(fmt.Sprintf("c%03d", i), int64(i%500))
	}
	var crowded []string
	for _, key := range b.Keys() {
		if names := r.Client.ZRange(ctx, key, 0, -1).Val(); len(names) > len(crowded) {
			crowded = names
		}
	}
	if len(crowded) < 16 {
		t.Fatalf("the fullest shard holds %d members", len(crowded))
	}
	for i, member := range crowded[:16] {
		set(member, int64(1000+i%5)) // the top 16, tied in fives at one value
	}
	want := m.sorted(rank.Ordinal)
	top, err := b.Top(ctx, 30)
	if err != nil || !same(top, want[:30]) {
		t.Fatalf("top 30\n got %v\nwant %v (%v)", top, want[:30], err)
	}
	first, cursor, err := b.Page(ctx, "", 3)
	if err != nil || !same(first, want[:3]) {
		t.Fatalf("first page %v, %v", first, err)
	}
	page, _, err := b.Page(ctx, cursor, 20)
	if err != nil || !same(page, want[3:23]) {
		t.Fatalf("page 3..23\n got %v\nwant %v (%v)", page, want[3:23], err)
	}
	for _, w := range want[:20] {
		got, err := b.Around(ctx, w.Member, 10)
		if exp := window(want, int(w.Rank)-1, 10); err != nil || !same(got, exp) {
			t.Fatalf("Around(%s, 10)\n got %v\nwant %v (%v)", w.Member, got, exp, err)
		}
	}
}

// Ties: at one score, who got there first ranks higher, a millisecond
// apart, at either end of the full range, on boards of both orders.
func TestTieBrokenByTimeExactly(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	for _, c := range []struct {
		order rank.Order
		score int64
	}{{rank.Descending, maxScore}, {rank.Descending, -maxScore}, {rank.Ascending, -maxScore}, {rank.Ascending, maxScore}} {
		clk := testenv.NewClock(epoch.Add(29 * 24 * time.Hour))
		b := newBoardWith(t, r, rank.Config{Name: fmt.Sprintf("ties%d%d", c.order, c.score), Shards: 3, Order: c.order, Now: clk.Now})
		if b.MaxScore() != maxScore || b.MinScore() != -maxScore {
			t.Fatalf("range %d..%d, want ±(2^53-1)", b.MinScore(), b.MaxScore())
		}
		for _, m := range []string{"a", "b", "c"} {
			if _, err := b.Set(ctx, m, c.score); err != nil {
				t.Fatal(err)
			}
			clk.Add(time.Millisecond)
		}
		// Re-setting the same score keeps the time it was first reached.
		if _, err := b.Set(ctx, "a", c.score); err != nil {
			t.Fatal(err)
		}
		top, err := b.Top(ctx, 3)
		if err != nil || len(top) != 3 {
			t.Fatalf("top: %v, %v", top, err)
		}
		if got := top[0].Member + top[1].Member + top[2].Member; got != "abc" {
			t.Fatalf("order %d, score %d: %s, want abc (earliest first)", c.order, c.score, got)
		}
		if !top[0].At.Equal(epoch.Add(29*24*time.Hour)) || top[0].Score != c.score {
			t.Fatalf("a: %+v", top[0])
		}
	}
}

// A board without an epoch or lifetime takes writes forever: with its
// clock ten years ahead it still accepts them and still orders ties by time.
func TestNoLifetime(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(testenv.Now())
	b := newBoardWith(t, r, rank.Config{Name: "forever", Shards: 7, Now: clk.Now})
	if _, err := b.Set(ctx, "early", 3_000_000); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Add(ctx, "carol", 3_000_000); err != nil {
		t.Fatalf("Add(carol, 3000000): %v", err)
	}
	clk.Add(10 * 366 * 24 * time.Hour)
	if _, err := b.Add(ctx, "late", 3_000_000); err != nil {
		t.Fatalf("ten years later: %v", err)
	}
	if _, err := b.Add(ctx, "carol", maxScore-3_000_000); err != nil {
		t.Fatal(err)
	}
	top, err := b.Top(ctx, 3)
	if err != nil || top[0].Member+" "+top[1].Member+" "+top[2].Member != "carol early late" {
		t.Fatalf("top %v, %v", top, err)
	}
	if start, end := b.Period(); !start.IsZero() || !end.IsZero() {
		t.Fatalf("period [%v, %v), want open", start, end)
	}
}

// Bad input — a score beyond ±(2^53−1), a sum beyond it, an empty member,
// an unknown order, ties mode or encoding — gets a clear error and changes
// nothing.
func TestBadInputRejected(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(epoch.Add(time.Minute))
	b := newBoard(t, r, "ranges", 3, clk.Now)
	b.Set(ctx, "x", 10)
	b.Set(ctx, "top", maxScore)
	for _, f := range []func() error{
		func() error { _, err := b.Set(ctx, "x", maxScore+1); return err },
		func() error { _, err := b.Set(ctx, "x", -maxScore-1); return err },
		func() error { _, err := b.Best(ctx, "x", math.MaxInt64); return err },
		func() error { _, err := b.Add(ctx, "x", maxScore+1); return err },
		func() error { _, err := b.Add(ctx, "top", 1); return err },
		func() error { _, err := b.Add(ctx, "x", maxScore); return err }, // a valid delta, the sum is not
	} {
		if err := f(); !errors.Is(err, rank.ErrScoreRange) {
			t.Errorf("err = %v, want ErrScoreRange", err)
		}
	}
	if _, err := b.Add(ctx, "x", -maxScore); err != nil {
		t.Fatalf("a sum within range: %v", err)
	}
	if _, err := b.Set(ctx, "", 1); err == nil {
		t.Error("empty member accepted")
	}
	if err := b.Remove(ctx, ""); err == nil {
		t.Error("Remove of an empty member accepted")
	}
	for m, want := range map[string]int64{"x": 10 - maxScore, "top": maxScore} {
		if e, _ := b.Score(ctx, m); e.Score != want {
			t.Fatalf("%s = %d after rejected updates, want %d", m, e.Score, want)
		}
	}
	if n, _ := b.Size(ctx); n != 2 {
		t.Fatalf("size %d, want 2", n)
	}
	clk.Add(-2 * time.Minute)
	if _, err := b.Set(ctx, "x", 1); !errors.Is(err, rank.ErrTimeRange) {
		t.Fatalf("write before the epoch: %v", err)
	}
	if _, err := b.Rank(ctx, "nobody"); !errors.Is(err, rank.ErrNotFound) {
		t.Fatalf("Rank of a stranger: %v", err)
	}
	if _, _, err := b.Page(ctx, "not-a-cursor!", 5); !errors.Is(err, rank.ErrBadCursor) {
		t.Fatalf("bad cursor: %v", err)
	}
	for _, cfg := range []rank.Config{{}, {Name: "x", Shards: -1}, {Name: "x", Order: 2}, {Name: "x", Ties: 3}, {Name: "x", Ties: -1},
		{Name: "x", Encoding: 7}, {Name: "x", Lifetime: time.Hour}, {Name: "x", Encoding: rank.EncodingPacked},
		{Name: "x", Epoch: epoch, Encoding: rank.EncodingPacked, Order: rank.Ascending},
		{Name: "x", Epoch: epoch, Encoding: rank.EncodingPacked, Lifetime: 100 * 365 * 24 * time.Hour, Resolution: time.Microsecond}} {
		if _, err := rank.New(r.Client, cfg); !errors.Is(err, rank.ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}

// Concurrent Adds from many goroutines sum exactly.
func TestConcurrentAddsSumExactly(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedisCluster(t)
	b := newBoard(t, r, "sum", 8, testenv.Now)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 50 {
				if _, err := b.Add(ctx, fmt.Sprintf("m%d", (g+i)%10), 3); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var total int64
	top, _ := b.Top(ctx, 100)
	for _, e := range top {
		total += e.Score
	}
	if total != 32*50*3 || len(top) != 10 {
		t.Fatalf("total %d over %d members, want %d over 10", total, len(top), 32*50*3)
	}
}

// Apply: pipelined batches agree with one-by-one updates, in order, across
// chunk boundaries, and report rejected updates without applying them.
func TestApplyBatch(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(epoch.Add(time.Hour))
	b := newBoard(t, r, "batch", 4, clk.Now)
	var ups []rank.Update
	want := map[string]int64{}
	for i := range 1000 {
		m := fmt.Sprintf("u%d", i%37)
		ups = append(ups, rank.Update{Member: m, Mode: rank.Increment, Value: int64(i % 5)})
		want[m] += int64(i % 5)
	}
	ups = append(ups, rank.Update{Member: "u1", Mode: rank.Increment, Value: maxScore})
	scores, err := b.Apply(ctx, ups)
	var rejected *rank.RejectedError
	if !errors.As(err, &rejected) || !errors.Is(err, rank.ErrScoreRange) || fmt.Sprint(rejected.Updates) != "[1000]" || scores[1000] != want["u1"] {
		t.Fatalf("rejected update: %v, %d", err, scores[len(scores)-1])
	}
	for m, w := range want {
		if e, _ := b.Score(ctx, m); e.Score != w {
			t.Fatalf("%s = %d, want %d", m, e.Score, w)
		}
	}
	if _, err := b.Apply(ctx, []rank.Update{{Member: "", Mode: rank.Replace}}); err == nil {
		t.Fatal("empty member accepted")
	}
	if _, err := b.Apply(ctx, []rank.Update{{Member: "x", Mode: 'z'}}); err == nil {
		t.Fatal("unknown mode accepted")
	}
}

func TestTopCachedRefreshesOncePerWindow(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(epoch.Add(time.Hour))
	b := newBoard(t, r, "cached", 2, clk.Now)
	b.Set(ctx, "a", 5)
	first, _ := b.TopCached(ctx, 10)
	b.Set(ctx, "b", 9)
	clk.Add(500 * time.Millisecond)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if got, _ := b.TopCached(ctx, 10); len(got) != 1 {
				t.Errorf("within the window: %v, want the cached [a]", got)
			}
		})
	}
	wg.Wait()
	clk.Add(600 * time.Millisecond)
	after, _ := b.TopCached(ctx, 10)
	if len(first) != 1 || len(after) != 2 || after[0].Member != "b" {
		t.Fatalf("before %v, after the window %v", first, after)
	}
	// A larger n than cached forces a fetch even when fresh.
	b.Set(ctx, "c", 1)
	if got, _ := b.TopCached(ctx, 2); len(got) != 2 {
		t.Fatalf("%v", got)
	}
}

func TestMeta(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedisCluster(t)
	b := newBoard(t, r, "meta", 8, testenv.Now)
	b.SetMeta(ctx, "p1", `{"name":"Ann"}`)
	b.SetMeta(ctx, "p2", `{"name":"Bo"}`)
	got, err := b.Meta(ctx, "p1", "p2", "p3")
	if err != nil || len(got) != 2 || got["p1"] != `{"name":"Ann"}` {
		t.Fatalf("%v, %v", got, err)
	}
	b.Remove(ctx, "p1")
	if got, _ := b.Meta(ctx, "p1"); len(got) != 0 {
		t.Fatalf("meta survived Remove: %v", got)
	}
}

func TestPeriodicBoards(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	shanghai, _ := time.LoadLocation("Asia/Shanghai")
	// 23:30 in Shanghai on a Sunday in the middle of next November (15:30
	// UTC), so that the next hour is a Monday of the same month. (In the
	// future: Redis expires keys on its own clock.)
	sunday := time.Date(testenv.Now().Year()+1, time.November, 14, 23, 30, 0, 0, shanghai)
	for sunday.Weekday() != time.Sunday {
		sunday = sunday.AddDate(0, 0, 1)
	}
	monday := sunday.Add(time.Hour)
	week := func(t time.Time) string { y, w := t.ISOWeek(); return fmt.Sprintf("%d-W%02d", y, w) }
	clk := testenv.NewClock(sunday)
	for _, c := range []struct {
		period    rank.Period
		label     string
		nextLabel string
	}{
		{rank.Daily, sunday.Format(time.DateOnly), monday.Format(time.DateOnly)},
		{rank.Weekly, week(sunday), week(monday)},
		{rank.Monthly, sunday.Format("2006-01"), monday.Format("2006-01")},
	} {
		if c.label == c.nextLabel && c.period != rank.Monthly {
			t.Fatalf("%v: %s and %s share a label", c.period, sunday, monday)
		}
		p, err := rank.NewPeriodic(r.Client, rank.PeriodicConfig{
			Board:  rank.Config{Name: "g", Namespace: r.Namespace, Now: clk.Now},
			Period: c.period, Location: shanghai, Retention: time.Hour,
		})
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.Current()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Add(ctx, "p", 1); err != nil {
			t.Fatal(err)
		}
		next, _ := p.At(clk.Now().Add(time.Hour)) // 00:30 local, Monday
		if got := b.Keys()[0]; !strings.Contains(got, "{g:"+c.label+":") {
			t.Errorf("%v board key %s, want label %s", c.period, got, c.label)
		}
		if got := next.Keys()[0]; !strings.Contains(got, "{g:"+c.nextLabel+":") {
			t.Errorf("%v next board key %s, want label %s", c.period, got, c.nextLabel)
		}
		ttl := r.Client.PTTL(ctx, b.Keys()[0]).Val()
		if ttl <= 0 {
			t.Fatalf("%v board has no expiry", c.period)
		}
	}
	// The daily board ends at local midnight: 30 min later it refuses writes,
	// and it expires an hour (the retention) after that.
	p, _ := rank.NewPeriodic(r.Client, rank.PeriodicConfig{Board: rank.Config{Name: "d", Namespace: r.Namespace, Now: clk.Now}, Period: rank.Daily, Location: shanghai, Retention: time.Hour})
	b, _ := p.Current()
	b.Add(ctx, "p", 1)
	clk.Add(time.Hour)
	if _, err := b.Add(ctx, "p", 1); !errors.Is(err, rank.ErrTimeRange) {
		t.Fatalf("write after the day ended: %v", err)
	}
	exp := r.Client.PExpireTime(ctx, b.Keys()[0]).Val()
	if want := time.Date(monday.Year(), monday.Month(), monday.Day(), 1, 0, 0, 0, shanghai); time.UnixMilli(int64(exp/time.Millisecond)).Sub(want).Abs() > time.Second {
		t.Fatalf("expires at %v, want %v", time.UnixMilli(int64(exp/time.Millisecond)), want)
	}
}

// A write whose reply is lost is retried by go-redis on a new connection; the
// retry must not add twice, and the caller gets the first call's answer.
func TestRetriedWriteAppliesOnce(t *testing.T) {
	ctx := context.Background()
	r, proxy := testenv.NewFaultyRedis(t)
	clk := testenv.NewClock(epoch.Add(time.Hour))
	b := newBoard(t, r, "retry", 3, clk.Now)
	if _, err := b.Add(ctx, "p", 5); err != nil {
		t.Fatal(err)
	}
	proxy.DropReplies(1)
	got, err := b.Add(ctx, "p", 5)
	if err != nil {
		t.Fatal(err)
	}
	if proxy.Cuts() != 1 {
		t.Fatalf("%d replies dropped, want 1", proxy.Cuts())
	}
	e, _ := b.Score(ctx, "p")
	if got != 10 || e.Score != 10 {
		t.Fatalf("Add(5) twice with one lost reply: answered %d, stored %d; want 10 and 10", got, e.Score)
	}
	// A batch over several shards and chunks, its reply lost: every update
	// applied once.
	var ups []rank.Update
	for i := range 700 {
		ups = append(ups, rank.Update{Member: fmt.Sprintf("m%d", i%300), Mode: rank.Increment, Value: 1})
	}
	proxy.DropReplies(1)
	if _, err := b.Apply(ctx, ups); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"m0", "m99", "m299"} {
		if e, _ := b.Score(ctx, m); e.Score != 3 && m != "m299" || m == "m299" && e.Score != 2 {
			t.Fatalf("%s scored %d after one batch with a lost reply", m, e.Score)
		}
	}
}

// ApplyOnce with the same id returns the first answer and changes nothing;
// another id applies again.
func TestApplyOnceDeduplicates(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(epoch.Add(time.Hour))
	b := newBoard(t, r, "once", 4, clk.Now)
	ups := []rank.Update{{Member: "a", Mode: rank.Increment, Value: 7}, {Member: "b", Mode: rank.Increment, Value: 1}, {Member: "a", Mode: rank.Increment, Value: 1}}
	for range 3 {
		got, err := b.ApplyOnce(ctx, "event-1", ups)
		if err != nil || fmt.Sprint(got) != "[7 1 8]" {
			t.Fatalf("ApplyOnce(event-1) = %v, %v; want [7 1 8]", got, err)
		}
	}
	if got, _ := b.ApplyOnce(ctx, "event-2", ups); fmt.Sprint(got) != "[15 2 16]" {
		t.Fatalf("ApplyOnce(event-2) = %v, want [15 2 16]", got)
	}
	for _, id := range []string{"", strings.Repeat("x", 65)} {
		if _, err := b.ApplyOnce(ctx, id, ups); err == nil {
			t.Errorf("request id of %d bytes accepted", len(id))
		}
	}
}

// Two Boards on one board name must agree on how values decode: on a
// packed board a writer or reader with another Epoch, Lifetime or
// Resolution is refused, on any board one of the other Order, and the
// board is unchanged.
func TestEncodingMismatchRefused(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(epoch.Add(2 * time.Hour))
	packed := newBoardWith(t, r, rank.Config{Name: "enc", Shards: 2, Epoch: epoch, Encoding: rank.EncodingPacked, Now: clk.Now})
	if _, err := packed.Set(ctx, "p", 500); err != nil {
		t.Fatal(err)
	}
	member := newBoardWith(t, r, rank.Config{Name: "enc2", Shards: 2, Now: clk.Now})
	if _, err := member.Set(ctx, "p", 500); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]rank.Config{
		"epoch an hour later":     {Name: "enc", Epoch: epoch.Add(time.Hour)},
		"shorter lifetime":        {Name: "enc", Epoch: epoch, Lifetime: 24 * time.Hour},
		"coarser resolution":      {Name: "enc", Epoch: epoch, Resolution: time.Second},
		"no epoch":                {Name: "enc"},
		"ascending on packed":     {Name: "enc", Epoch: epoch, Order: rank.Ascending},
		"dense on packed":         {Name: "enc", Epoch: epoch, Ties: rank.Dense},
		"member on packed":        {Name: "enc", Epoch: epoch, Encoding: rank.EncodingMember},
		"ascending on descending": {Name: "enc2", Order: rank.Ascending},
		"packed on member":        {Name: "enc2", Epoch: epoch, Encoding: rank.EncodingPacked},
	} {
		cfg.Namespace, cfg.Shards, cfg.Now = r.Namespace, 2, clk.Now
		other, err := rank.New(r.Client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Add(ctx, "p", 1); !errors.Is(err, rank.ErrEncodingMismatch) {
			t.Errorf("%s: Add: %v, want ErrEncodingMismatch", name, err)
		}
		if _, err := other.Top(ctx, 10); !errors.Is(err, rank.ErrEncodingMismatch) {
			t.Errorf("%s: Top: %v, want ErrEncodingMismatch", name, err)
		}
		if _, err := other.Score(ctx, "p"); !errors.Is(err, rank.ErrEncodingMismatch) {
			t.Errorf("%s: Score: %v, want ErrEncodingMismatch", name, err)
		}
	}
	for _, b := range []*rank.Board{packed, member} {
		if e, err := b.Score(ctx, "p"); err != nil || e.Score != 500 {
			t.Fatalf("after refused writers: %+v, %v; want 500", e, err)
		}
	}
}

// A board written in the packed encoding — by hand here, as the code before
// EncodingMember wrote it — is still read and written correctly by a Board
// of the default configuration given its Epoch: scores, times, ties,
// ranks, pages, and its limits (MaxScore, the lifetime).
func TestPackedBoardStillReadsAndWrites(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	const timeBits = 32 // 30 days at 1 ms
	clk := testenv.NewClock(epoch.Add(time.Hour))
	old := newBoardWith(t, r, rank.Config{Name: "old", Shards: 3, Epoch: epoch, Now: clk.Now})
	record := fmt.Sprintf("epoch=%s lifetime=720h0m0s resolution=1ms", epoch.UTC().Format(time.RFC3339Nano))
	m := newModel(rank.Descending)
	m.min, m.max = 0, 1<<(53-timeBits)-1
	for i, key := range old.Keys() {
		tag := strings.TrimSuffix(key, ":rank")
		r.Client.Set(ctx, tag+":encoding", record, 0)
		for j := range 20 {
			member, score, tick := fmt.Sprintf("m%d-%d", i, j), int64(j%4), int64(j/3)
			if old.Keys()[shardOf(old, member)] != key {
				continue
			}
			value := float64(score<<timeBits + (1<<timeBits - 1 - tick))
			r.Client.ZAdd(ctx, key, redis.Z{Score: value, Member: member})
			m.apply("set", member, score, tick)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	checkBoard(t, ctx, old, m.sorted(rank.Ordinal), rng, "as written")
	if old.MaxScore() != 1<<21-1 || old.MinScore() != 0 {
		t.Fatalf("range %d..%d, want 0..2^21-1", old.MinScore(), old.MaxScore())
	}
	for i := range 40 {
		member := fmt.Sprintf("w%d", i%9)
		v := int64(i % 5)
		m.apply("add", member, v, clk.Now().Sub(epoch).Milliseconds())
		if _, err := old.Add(ctx, member, v); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Duration(i%2) * time.Millisecond)
	}
	if _, err := old.Set(ctx, "w1", 1<<21); !errors.Is(err, rank.ErrScoreRange) {
		t.Fatalf("beyond a packed board's MaxScore: %v", err)
	}
	if err := old.Remove(ctx, "w2"); err != nil {
		t.Fatal(err)
	}
	m.apply("remove", "w2", 0, 0)
	checkBoard(t, ctx, old, m.sorted(rank.Ordinal), rng, "after writes")
	clk.Add(31 * 24 * time.Hour)
	if _, err := old.Add(ctx, "w1", 1); !errors.Is(err, rank.ErrTimeRange) {
		t.Fatalf("a packed board after its lifetime: %v", err)
	}
}

// shardOf is the shard a board puts member on: xxhash mod shards, as
// written by every version.
func shardOf(b *rank.Board, member string) int {
	return int(xxhash.Sum64String(member) % uint64(len(b.Keys())))
}

// A daily board covers every instant of its local date, starting at the
// first one — which is not midnight where DST starts at midnight (Havana,
// Santiago) — and a write at any of them is accepted.
func TestPeriodsStartAtTheFirstInstantOfTheirDate(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	for _, zone := range []string{"America/Havana", "America/Santiago", "Asia/Beirut", "Europe/Berlin", "Australia/Lord_Howe"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, period := range []rank.Period{rank.Daily, rank.Weekly, rank.Monthly} {
			clk := testenv.NewClock(time.Time{})
			p, err := rank.NewPeriodic(r.Client, rank.PeriodicConfig{Board: rank.Config{Name: fmt.Sprintf("%s-%d", zone, period), Namespace: r.Namespace, Now: clk.Now}, Period: period, Location: loc})
			if err != nil {
				t.Fatal(err)
			}
			// Every half hour of this year, plus the instants just around
			// each local midnight.
			year := testenv.Now().Year()
			for at := time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC); at.Year() == year; at = at.Add(30 * time.Minute) {
				clk.Set(at)
				b, err := p.Current()
				if err != nil {
					t.Fatal(err)
				}
				start, end := b.Period()
				if at.Before(start) || !at.Before(end) {
					t.Fatalf("%s %d: %v is outside its board's period [%v, %v)", zone, period, at.In(loc), start.In(loc), end.In(loc))
				}
				if period == rank.Daily {
					y, m, d := at.In(loc).Date()
					sy, sm, sd := start.In(loc).Date()
					py, pm, pd := start.Add(-time.Nanosecond).In(loc).Date()
					if sy != y || sm != m || sd != d || py == y && pm == m && pd == d {
						t.Fatalf("%s: the board of %v starts at %v, not the first instant of its date", zone, at.In(loc), start.In(loc))
					}
				}
				if at.Minute() == 30 && at.Hour()%6 == 0 && period == rank.Daily {
					if _, err := b.Add(ctx, "m", 1); err != nil {
						t.Fatalf("%s: write at %v: %v", zone, at.In(loc), err)
					}
				}
			}
		}
	}
}

// Only calls that carry an Increment, and every ApplyOnce, leave a reply
// for replays: a Set or Best applied twice gives the same scores.
func TestReplayRecordOnlyWhereNeeded(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	b := newBoardWith(t, r, rank.Config{Name: "replay", Shards: 2, Now: testenv.Now})
	records := func() int {
		ks, err := testenv.ScanKeys(ctx, r.Client, r.Namespace+"*:req:*")
		if err != nil {
			t.Fatal(err)
		}
		return len(ks)
	}
	b.Set(ctx, "a", 5)
	b.Best(ctx, "a", 7)
	if n := records(); n != 0 {
		t.Fatalf("%d reply records after Set and Best, want 0", n)
	}
	b.Add(ctx, "a", 1)
	if n := records(); n != 1 {
		t.Fatalf("%d reply records after Add, want 1", n)
	}
	b.ApplyOnce(ctx, "ev", []rank.Update{{Member: "a", Mode: rank.Replace, Value: 1}})
	if n := records(); n != 2 {
		t.Fatalf("%d reply records after ApplyOnce, want 2", n)
	}
}
