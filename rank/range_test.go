package rank_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/rank"
)

// inRange is the entries of want (the model, in order) whose score is in
// [lo, hi], with their global ranks.
func inRange(want []rank.Entry, lo, hi int64) []rank.Entry {
	var out []rank.Entry
	for _, e := range want {
		if lo <= e.Score && e.Score <= hi {
			out = append(out, e)
		}
	}
	return out
}

// checkRanges compares Range, paged, and RankIn with the model.
func checkRanges(t *testing.T, ctx context.Context, b *rank.Board, want []rank.Entry, rng *rand.Rand, what string) {
	t.Helper()
	what += fmt.Sprintf(", %d shards", len(b.Keys()))
	pick := func() int64 {
		if len(want) > 0 && rng.IntN(3) > 0 {
			return want[rng.IntN(len(want))].Score
		}
		return min(max(randomValue(rng), b.MinScore()), b.MaxScore())
	}
	for range 2 {
		x, y := pick(), pick()
		lo, hi := min(x, y), max(x, y)
		if rng.IntN(8) == 0 {
			lo, hi = b.MinScore(), b.MaxScore()
		}
		n := 1 + rng.IntN(5)
		var got []rank.Entry
		cursor := ""
		for pages := 0; ; pages++ {
			page, next, err := b.Range(ctx, lo, hi, cursor, n)
			if err != nil || pages > len(want)+1 {
				t.Fatalf("%s: Range(%d, %d, page %d): %v", what, lo, hi, pages, err)
			}
			got = append(got, page...)
			if next == "" {
				break
			}
			if len(page) != n {
				t.Fatalf("%s: Range(%d, %d): a page of %d, want %d, with a cursor", what, lo, hi, len(page), n)
			}
			cursor = next
		}
		if exp := inRange(want, lo, hi); !same(got, exp) {
			t.Fatalf("%s: Range(%d, %d) by %d\n got %v\nwant %v", what, lo, hi, n, got, exp)
		}
	}
	// A friends list: some members, a stranger, a name twice.
	var friends []string
	for range rng.IntN(8) {
		if len(want) > 0 {
			friends = append(friends, want[rng.IntN(len(want))].Member)
		}
	}
	friends = append(friends, "stranger")
	if len(friends) > 1 {
		friends = append(friends, friends[0])
	}
	got, err := b.RankIn(ctx, friends)
	var exp []rank.Entry
	for _, e := range want {
		if slices.Contains(friends, e.Member) {
			exp = append(exp, e)
		}
	}
	entries := make([]rank.Entry, len(got))
	for i, s := range got {
		entries[i] = s.Entry
		if s.Place != int64(i+1) {
			t.Fatalf("%s: RankIn: %s at place %d, want %d", what, s.Member, s.Place, i+1)
		}
	}
	if err != nil || !same(entries, exp) {
		t.Fatalf("%s: RankIn(%v)\n got %v\nwant %v (%v)", what, friends, entries, exp, err)
	}
}

// removeRange takes the entries of the model's order from position start
// to stop (1-based, inclusive) or with a score in [lo, hi] off the model,
// and returns how many.
func (m *model) removeWhere(gone func(i int, e rank.Entry) bool) int64 {
	var n int64
	for i, e := range m.sorted(rank.Ordinal) {
		if gone(i, e) {
			m.apply("remove", e.Member, 0, 0)
			n++
		}
	}
	return n
}

// TestRemoveRangesAgainstModel removes random score ranges and position
// ranges from boards of both orders over 1, 7 and 64 shards, with ties and
// scores across the whole range, and checks every read against the model
// after each; removed members leave the ties hash and their metadata.
func TestRemoveRangesAgainstModel(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		for _, order := range []rank.Order{rank.Descending, rank.Ascending} {
			for _, shards := range []int{1, 7, 64} {
				clk := testenv.NewClock(epoch.Add(time.Hour))
				name := fmt.Sprintf("rm%d-%d", order, shards)
				writer := newBoardWith(t, r, rank.Config{Name: name, Shards: shards, Order: order, Now: clk.Now})
				views := map[rank.Ties]*rank.Board{rank.Ordinal: writer}
				for _, ties := range []rank.Ties{rank.Competition, rank.Dense} {
					views[ties] = newBoardWith(t, r, rank.Config{Name: name, Shards: shards, Order: order, Ties: ties, Now: clk.Now})
				}
				m := newModel(order)
				rng := rand.New(rand.NewPCG(uint64(shards), uint64(order)))
				for round := range 12 {
					for range 30 {
						member := fmt.Sprintf("p%02d", rng.IntN(80))
						v := randomValue(rng)
						m.apply("set", member, v, clk.Now().Sub(epoch).Milliseconds())
						if _, err := writer.Set(ctx, member, v); err != nil {
							t.Fatal(err)
						}
						if err := writer.SetMeta(ctx, member, "meta"); err != nil {
							t.Fatal(err)
						}
						clk.Add(time.Duration(rng.IntN(2)) * time.Millisecond)
					}
					what := fmt.Sprintf("order %d, %d shards, round %d", order, shards, round)
					var got, exp int64
					var err error
					var removed []string
					before := m.sorted(rank.Ordinal)
					if round%2 == 0 {
						x, y := randomValue(rng), randomValue(rng)
						if len(before) > 0 {
							x = before[rng.IntN(len(before))].Score
						}
						lo, hi := min(x, y), max(x, y)
						exp = m.removeWhere(func(_ int, e rank.Entry) bool { return lo <= e.Score && e.Score <= hi })
						got, err = views[rank.Ties(round%3)].RemoveRangeByScore(ctx, lo, hi)
						what += fmt.Sprintf(", RemoveRangeByScore(%d, %d)", lo, hi)
					} else {
						start := 1 + rng.Int64N(int64(len(before))+2)
						stop := start + rng.Int64N(6)
						if rng.IntN(4) == 0 {
							stop = math.MaxInt64
						}
						exp = m.removeWhere(func(i int, _ rank.Entry) bool { return start <= int64(i+1) && int64(i+1) <= stop })
						got, err = views[rank.Ties(round%3)].RemoveRangeByRank(ctx, start, stop)
						what += fmt.Sprintf(", RemoveRangeByRank(%d, %d)", start, stop)
					}
					for _, e := range before {
						if _, ok := m.score[e.Member]; !ok {
							removed = append(removed, e.Member)
						}
					}
					if err != nil || got != exp {
						t.Fatalf("%s: removed %d, %v; want %d", what, got, err, exp)
					}
					for ties, b := range views {
						want := m.sorted(ties)
						checkBoard(t, ctx, b, want, rng, what)
						checkRanges(t, ctx, b, want, rng, what)
					}
					checkGone(t, ctx, r, writer, removed, what)
				}
			}
		}
	})
}

// checkGone: removed members have no metadata and no tie-break prefix
// left, and each shard's ties hash holds exactly its sorted set's members.
func checkGone(t *testing.T, ctx context.Context, r *testenv.Redis, b *rank.Board, removed []string, what string) {
	t.Helper()
	if len(removed) > 0 {
		if meta, err := b.Meta(ctx, removed...); err != nil || len(meta) != 0 {
			t.Fatalf("%s: metadata of removed members survived: %v, %v", what, meta, err)
		}
	}
	for _, key := range b.Keys() {
		ties := key[:len(key)-len("rank")] + "ties"
		if z, h := r.Client.ZCard(ctx, key).Val(), r.Client.HLen(ctx, ties).Val(); z != h {
			t.Fatalf("%s: %s holds %d members, its ties hash %d", what, key, z, h)
		}
	}
}

// A packed board (Descending, Ordinal) supports every new operation.
func TestRangesOnPackedBoard(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(epoch.Add(time.Hour))
	b := newBoardWith(t, r, rank.Config{Name: "packed-ranges", Shards: 5, Epoch: epoch, Encoding: rank.EncodingPacked, Now: clk.Now})
	m := newModel(rank.Descending)
	m.min, m.max = 0, b.MaxScore()
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 120 {
		member, v := fmt.Sprintf("k%02d", i%70), int64(rng.IntN(9))
		m.apply("set", member, v, clk.Now().Sub(epoch).Milliseconds())
		if _, err := b.Set(ctx, member, v); err != nil {
			t.Fatal(err)
		}
		b.SetMeta(ctx, member, "x")
		clk.Add(time.Duration(rng.IntN(2)) * time.Millisecond)
	}
	checkRanges(t, ctx, b, m.sorted(rank.Ordinal), rng, "packed")
	exp := m.removeWhere(func(_ int, e rank.Entry) bool { return 2 <= e.Score && e.Score <= 4 })
	if got, err := b.RemoveRangeByScore(ctx, 2, 4); err != nil || got != exp {
		t.Fatalf("RemoveRangeByScore(2, 4) = %d, %v; want %d", got, err, exp)
	}
	exp = m.removeWhere(func(i int, _ rank.Entry) bool { return 3 <= i+1 && i+1 <= 9 })
	if got, err := b.RemoveRangeByRank(ctx, 3, 9); err != nil || got != exp {
		t.Fatalf("RemoveRangeByRank(3, 9) = %d, %v; want %d", got, err, exp)
	}
	checkBoard(t, ctx, b, m.sorted(rank.Ordinal), rng, "packed, after removals")
	checkRanges(t, ctx, b, m.sorted(rank.Ordinal), rng, "packed, after removals")
}

// Bad input — min above max, a page size out of bounds, a forged or
// foreign cursor, start above stop, an empty member, a bad request id —
// gets ErrInvalid (or ErrScoreRange) and changes nothing.
func TestRangeBadInputRejected(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(epoch.Add(time.Hour))
	b := newBoardWith(t, r, rank.Config{Name: "range-bad", Shards: 3, Now: clk.Now})
	other := newBoardWith(t, r, rank.Config{Name: "range-bad-2", Shards: 2, Now: clk.Now})
	for i := range 10 {
		b.Set(ctx, fmt.Sprintf("m%d", i), int64(i%4))
		clk.Add(time.Millisecond)
	}
	before, _ := b.Top(ctx, 100)
	_, cursor, err := b.Range(ctx, 0, 3, "", 2)
	if err != nil || cursor == "" {
		t.Fatalf("first page: %q, %v", cursor, err)
	}
	_, pageCursor, _ := b.Page(ctx, "", 2)
	raw, _ := base64.RawURLEncoding.DecodeString(cursor)
	forged := base64.RawURLEncoding.EncodeToString(append([]byte("-5:3"), raw[3:]...)) // another range's bounds
	invalid := []struct {
		what string
		err  error
	}{}
	try := func(what string, err error) {
		invalid = append(invalid, struct {
			what string
			err  error
		}{what, err})
	}
	_, _, err = b.Range(ctx, 3, 0, "", 2)
	try("Range min > max", err)
	_, _, err = b.Range(ctx, 0, 3, "", 0)
	try("Range n = 0", err)
	_, _, err = b.Range(ctx, 0, 3, "", -1)
	try("Range n < 0", err)
	_, _, err = b.Range(ctx, 0, 3, "%%%", 2)
	try("Range malformed cursor", err)
	_, _, err = b.Range(ctx, 0, 3, forged, 2)
	try("Range forged cursor", err)
	_, _, err = b.Range(ctx, 0, 2, cursor, 2)
	try("Range cursor of another range", err)
	_, _, err = b.Range(ctx, 0, 3, pageCursor, 2)
	try("Range with Page's cursor", err)
	_, err = b.RemoveRangeByScore(ctx, 3, 0)
	try("RemoveRangeByScore min > max", err)
	_, err = b.RemoveRangeByRank(ctx, 5, 4)
	try("RemoveRangeByRank start > stop", err)
	_, err = b.RemoveRangeByRank(ctx, 0, 4)
	try("RemoveRangeByRank start 0", err)
	_, err = b.RankIn(ctx, []string{"m1", ""})
	try("RankIn empty member", err)
	_, err = rank.RankAcross(ctx, "", b, other)
	try("RankAcross empty member", err)
	_, err = rank.ApplyAcross(ctx, "id", rank.Update{Member: "", Mode: rank.Increment, Value: 1}, b, other)
	try("ApplyAcross empty member", err)
	_, err = rank.ApplyAcross(ctx, "", rank.Update{Member: "m1", Mode: rank.Increment, Value: 1}, b, other)
	try("ApplyAcross empty request id", err)
	for _, c := range invalid {
		if !errors.Is(c.err, rank.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.what, c.err)
		}
	}
	if _, err := b.RemoveRangeByScore(ctx, 0, maxScore+1); !errors.Is(err, rank.ErrScoreRange) {
		t.Errorf("RemoveRangeByScore beyond the range: %v", err)
	}
	if _, err := rank.ApplyAcross(ctx, "id", rank.Update{Member: "m1", Mode: rank.Replace, Value: maxScore + 1}, b, other); !errors.Is(err, rank.ErrScoreRange) {
		t.Errorf("ApplyAcross beyond the range: %v", err)
	}
	after, _ := b.Top(ctx, 100)
	if !same(before, after) {
		t.Fatalf("bad input changed the board:\n%v\n%v", before, after)
	}
	if n, _ := other.Size(ctx); n != 0 {
		t.Fatalf("bad input wrote %d members to the other board", n)
	}
}

// RankAcross gives a member's entry on each board, the zero Entry where
// it is absent.
func TestRankAcross(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(epoch.Add(time.Hour))
	a := newBoardWith(t, r, rank.Config{Name: "across-a", Shards: 4, Now: clk.Now})
	d := newBoardWith(t, r, rank.Config{Name: "across-d", Shards: 1, Order: rank.Ascending, Ties: rank.Dense, Now: clk.Now})
	none := newBoardWith(t, r, rank.Config{Name: "across-none", Shards: 2, Now: clk.Now})
	for i, s := range []int64{5, 9, 7} {
		m := fmt.Sprintf("m%d", i)
		a.Set(ctx, m, s)
		d.Set(ctx, m, s)
	}
	got, err := rank.RankAcross(ctx, "m2", a, d, none)
	if err != nil || len(got) != 3 || got[0].Rank != 2 || got[0].Score != 7 || got[1].Rank != 2 || got[2] != (rank.Entry{}) {
		t.Fatalf("RankAcross(m2) = %+v, %v", got, err)
	}
}

// ApplyAcross: a lost reply retried by go-redis applies once on every
// board; a call that failed half-way through the boards, called again with
// the same id, applies the rest and nothing twice.
func TestApplyAcrossRetrySafe(t *testing.T) {
	ctx := context.Background()
	r, proxy := testenv.NewFaultyRedis(t)
	clk := testenv.NewClock(epoch.Add(time.Hour))
	var boards []*rank.Board
	for i := range 3 {
		b := newBoardWith(t, r, rank.Config{Name: fmt.Sprintf("across-%d", i), Shards: 1 + 2*i, Now: clk.Now})
		if _, err := b.Set(ctx, "warm", 1); err != nil { // reads the encoding once
			t.Fatal(err)
		}
		boards = append(boards, b)
	}
	up := rank.Update{Member: "p", Mode: rank.Increment, Value: 5}
	proxy.DropReplyTo("across-1", 1)
	got, err := rank.ApplyAcross(ctx, "ev-1", up, boards...)
	if err != nil || fmt.Sprint(got) != "[5 5 5]" || proxy.Cuts() != 1 {
		t.Fatalf("with a lost reply: %v, %v, %d cut", got, err, proxy.Cuts())
	}
	// The same boards on a client that does not retry: the second board's
	// reply lost fails the call there, after the first applied.
	noRetry := &testenv.Redis{Client: newClientNoRetry(t, proxy.Addr), Namespace: r.Namespace, Kind: r.Kind}
	var once []*rank.Board
	for i := range 3 {
		b := newBoardWith(t, noRetry, rank.Config{Name: fmt.Sprintf("across-%d", i), Shards: 1 + 2*i, Now: clk.Now})
		if _, err := b.Score(ctx, "warm"); err != nil { // reads the encoding once
			t.Fatal(err)
		}
		once = append(once, b)
	}
	proxy.DropReplyTo("across-1", 1)
	if _, err := rank.ApplyAcross(ctx, "ev-2", up, once...); err == nil {
		t.Fatal("a lost reply without retries did not fail the call")
	}
	want := []int64{10, 10, 5} // the first applied, the second too (its reply was lost), the third not
	for i, b := range once {
		if e, _ := b.Score(ctx, "p"); e.Score != want[i] {
			t.Fatalf("after the failed call: board %d has %d, want %d", i, e.Score, want[i])
		}
	}
	for range 2 {
		got, err := rank.ApplyAcross(ctx, "ev-2", up, once...)
		if err != nil || fmt.Sprint(got) != "[10 10 10]" {
			t.Fatalf("the retry: %v, %v; want [10 10 10]", got, err)
		}
	}
}

func newClientNoRetry(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// A board that refuses ApplyAcross's update (the sum would leave its range)
// keeps the member's score; the others apply, and the error says which.
func TestApplyAcrossReportsRefusingBoards(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(epoch.Add(time.Hour))
	member := newBoardWith(t, r, rank.Config{Name: "refuse-member", Shards: 2, Now: clk.Now})
	packed := newBoardWith(t, r, rank.Config{Name: "refuse-packed", Shards: 2, Epoch: epoch, Encoding: rank.EncodingPacked, Now: clk.Now})
	if _, err := packed.Set(ctx, "p", packed.MaxScore()); err != nil {
		t.Fatal(err)
	}
	got, err := rank.ApplyAcross(ctx, "ev", rank.Update{Member: "p", Mode: rank.Increment, Value: 1}, member, packed)
	var rejected *rank.RejectedError
	if !errors.As(err, &rejected) || fmt.Sprint(rejected.Updates) != "[1]" || fmt.Sprint(got) != fmt.Sprint([]int64{1, packed.MaxScore()}) {
		t.Fatalf("ApplyAcross = %v, %v; want [1 %d] and board 1 refusing", got, err, packed.MaxScore())
	}
}
