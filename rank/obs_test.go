package rank_test

import (
	"context"
	"errors"
	"testing"

	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/rank"
)

// TestMetricsAndSpans: a scripted run on a board, read with the SDK's
// manual reader and an in-memory span exporter; every count is exact.
// Calls a board makes to its own operations (Set's Apply, Page's first
// Top) are not counted again; TopCached's refresh, a read of Redis, counts
// as a top, its answers from memory not at all.
func TestMetricsAndSpans(t *testing.T) {
	ctx := context.Background()
	reader, mp, spans, tp := obstest.NewSDK()
	b := newBoardWith(t, testenv.NewRedis(t), rank.Config{Name: "observed", Shards: 3, MeterProvider: mp, TracerProvider: tp})
	want := map[string]float64{}
	count := func(op string, err, wantErr error, reason string) {
		t.Helper()
		if !errors.Is(err, wantErr) {
			t.Fatalf("%s: %v, want %v", op, err, wantErr)
		}
		outcome := "ok"
		if reason != "" {
			outcome = "refused"
		}
		obstest.AddOp(want, "rank", op, outcome, reason, 1)
	}
	_, err := b.Set(ctx, "a", 10)
	count("set", err, nil, "")
	_, err = b.Add(ctx, "b", 5)
	count("add", err, nil, "")
	_, err = b.Best(ctx, "a", 3)
	count("best", err, nil, "")
	_, err = b.Set(ctx, "", 1)
	count("set", err, rank.ErrInvalid, "invalid")
	_, err = b.Add(ctx, "a", b.MaxScore())
	count("add", err, rank.ErrScoreRange, "score_range")
	_, err = b.Apply(ctx, []rank.Update{{Member: "c", Mode: rank.Replace, Value: 7}, {Member: "d", Mode: rank.Increment, Value: 1}})
	count("apply", err, nil, "")
	_, err = b.ApplyOnce(ctx, "req-1", []rank.Update{{Member: "e", Mode: rank.Replace, Value: 2}})
	count("apply_once", err, nil, "")
	_, err = b.Rank(ctx, "a")
	count("rank", err, nil, "")
	_, err = b.Rank(ctx, "nobody")
	count("rank", err, rank.ErrNotFound, "not_found")
	_, err = b.Top(ctx, 2)
	count("top", err, nil, "")
	_, err = b.Top(ctx, -1)
	count("top", err, rank.ErrInvalid, "invalid")
	_, _, err = b.Page(ctx, "", 2)
	count("page", err, nil, "")
	_, _, err = b.Page(ctx, "not-a-cursor", 2)
	count("page", err, rank.ErrBadCursor, "bad_cursor")
	_, err = b.Around(ctx, "b", 1)
	count("around", err, nil, "")
	_, err = b.CountInRange(ctx, 5, 1)
	count("count_in_range", err, rank.ErrInvalid, "invalid")
	_, err = b.RankOfScore(ctx, 6)
	count("rank_of_score", err, nil, "")
	_, err = b.Percentile(ctx, "a")
	count("percentile", err, nil, "")
	_, err = b.Size(ctx)
	count("size", err, nil, "")
	_, _, err = b.Range(ctx, 0, 100, "", 2)
	count("range", err, nil, "")
	_, _, err = b.Range(ctx, 0, 100, "forged", 2)
	count("range", err, rank.ErrInvalid, "invalid")
	_, err = b.RankIn(ctx, []string{"a", "b", "nobody"})
	count("rank_in", err, nil, "")
	_, err = rank.RankAcross(ctx, "a", b)
	count("rank_across", err, nil, "")
	_, err = rank.RankAcross(ctx, "nobody", b) // absent: a zero Entry, an ok answer
	count("rank_across", err, nil, "")
	_, err = rank.ApplyAcross(ctx, "req-2", rank.Update{Member: "f", Mode: rank.Increment, Value: 1}, b)
	count("apply_across", err, nil, "")
	_, err = rank.ApplyAcross(ctx, "", rank.Update{Member: "f", Mode: rank.Increment, Value: 1}, b)
	count("apply_across", err, rank.ErrInvalid, "invalid")
	_, err = b.RemoveRangeByScore(ctx, 7, 7)
	count("remove_range_by_score", err, nil, "")
	_, err = b.RemoveRangeByRank(ctx, 2, 1)
	count("remove_range_by_rank", err, rank.ErrInvalid, "invalid")
	_, err = b.RemoveRangeByRank(ctx, 100, 200)
	count("remove_range_by_rank", err, nil, "")
	count("set_meta", b.SetMeta(ctx, "a", "gold"), nil, "")
	_, err = b.Meta(ctx, "a")
	count("meta", err, nil, "")
	for range 2 { // one refresh reads the top, the other is served from memory
		if _, err := b.TopCached(ctx, 2); err != nil {
			t.Fatal(err)
		}
	}
	obstest.AddOp(want, "rank", "top", "ok", "", 1)
	count("remove", b.Remove(ctx, "a"), nil, "")
	_, err = b.Score(ctx, "a")
	count("score", err, rank.ErrNotFound, "not_found")
	obstest.Expect(t, obstest.Points(t, reader), want)

	wantSpans := map[string]int{}
	for k, n := range want {
		if name, ok := cutOp(k); ok {
			wantSpans["rank."+name] += int(n)
		}
	}
	obstest.ExpectSpans(t, spans, wantSpans)
}

// cutOp returns the operation of a "casebook.rank.operations …" point.
func cutOp(point string) (string, bool) {
	const prefix = "casebook.rank.operations casebook.operation="
	if len(point) <= len(prefix) || point[:len(prefix)] != prefix {
		return "", false
	}
	rest := point[len(prefix):]
	for i := range rest {
		if rest[i] == ',' {
			return rest[:i], true
		}
	}
	return rest, true
}
