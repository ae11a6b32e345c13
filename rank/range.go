package rank

import (
	"context"
	_ "embed"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/luascript"
)

var (
	//go:embed order.lua
	orderLua string
	//go:embed remove_range.lua
	removeRangeLua    string
	removeRangeScript = redis.NewScript(orderLua + removeRangeLua)
)

// Range returns the members whose score is in [minScore, maxScore], n at a
// time (1..1000), in the board's order and ranked as Top ranks them, and
// the cursor of the next page: "" for the first page, "" back when the
// range has no more. A cursor resumes right after the last entry returned
// and remembers its place and rank, as Page's do (members that move between
// two calls may be seen twice or not at all); one made for another range,
// or not by Range, is refused with ErrInvalid (wrapping ErrBadCursor) and
// reads nothing.
//
// Cost: a page is read as Page reads one, from a place — one position.lua
// call per shard, pipelined, that also counts the entries ranked before
// the range, so the first page's ranks need no more; a second round trip
// only to the shards whose last entry still made the cut. On a Dense board
// the first page's first rank costs what Rank's does.
func (b *Board) Range(ctx context.Context, minScore, maxScore int64, cursor string, n int) (_ []Entry, _ string, err error) {
	ctx, call := b.obs.rangeOp.Start(ctx)
	defer func() { err = call.End(err) }()
	if n < 1 || n > 1000 {
		return nil, "", fmt.Errorf("%w: range page size %d is outside 1..1000", ErrInvalid, n)
	}
	var page []Entry
	var next string
	err = b.settled(ctx, func(Encoding) (err error) {
		page, next, err = b.scoreRange(ctx, minScore, maxScore, cursor, n)
		return err
	})
	return page, next, err
}

// scoreRange is Range's work, in the encoding read last.
func (b *Board) scoreRange(ctx context.Context, minScore, maxScore int64, cursor string, n int) ([]Entry, string, error) {
	lo, hi, err := b.storedRange(minScore, maxScore, "range")
	if err != nil {
		return nil, "", err
	}
	// Ranked before every entry with a value up to hi and after every other
	// one: the member '' is below every member at hi + 1.
	from := Entry{value: hi + 1}
	if cursor != "" {
		if from, err = b.decodeRangeCursor(cursor, lo, hi); err != nil {
			return nil, "", err
		}
	}
	page, ahead, err := b.after(ctx, from, n+1, lo) // one more: is there a next page?
	if err != nil {
		return nil, "", err
	}
	if cursor != "" {
		b.numberAfter(from, page)
	} else if page, err = b.numberRange(ctx, page, 1+ahead); err != nil {
		return nil, "", err
	}
	if len(page) <= n {
		return page, "", nil
	}
	page = page[:n]
	return page, b.encodeRangeCursor(lo, hi, page[n-1]), nil
}

// numberRange numbers a range's first page from its first entry's ordinal
// rank. Every entry ranked before that one has a greater value, so its
// Competition rank is its ordinal; only Dense needs a count.
func (b *Board) numberRange(ctx context.Context, es []Entry, ordinal int64) ([]Entry, error) {
	if len(es) == 0 || b.cfg.Ties == Dense {
		return b.numbered(ctx, es, ordinal)
	}
	es[0].ordinal, es[0].Rank = ordinal, ordinal
	b.numberAfter(es[0], es[1:])
	return es, nil
}

// encodeRangeCursor binds a cursor to the range's stored values lo..hi.
func (b *Board) encodeRangeCursor(lo, hi int64, e Entry) string {
	raw := strconv.FormatInt(lo, 10) + ":" + strconv.FormatInt(hi, 10) + ":" + cursorText(e)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func (b *Board) decodeRangeCursor(c string, lo, hi int64) (Entry, error) {
	bad := func(why string) (Entry, error) {
		return Entry{}, fmt.Errorf("%w: range cursor: %w: %s", ErrInvalid, ErrBadCursor, why)
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return bad("not base64url")
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 || parts[0] != strconv.FormatInt(lo, 10) || parts[1] != strconv.FormatInt(hi, 10) {
		return bad("made for another range")
	}
	e, err := b.parseCursor(parts[2])
	if err != nil {
		return bad("malformed")
	}
	if e.value < lo || e.value > hi {
		return bad("its entry is outside the range")
	}
	return e, nil
}

// RemoveRangeByScore removes the members whose score is in [minScore,
// maxScore], with their metadata, as Remove does, and returns how many it
// removed: one script call per shard, pipelined, each atomic on its shard,
// O(log² n + k) for the k it removes there (a shard is held while it
// removes them: remove millions in slices of the range).
func (b *Board) RemoveRangeByScore(ctx context.Context, minScore, maxScore int64) (_ int64, err error) {
	ctx, call := b.obs.removeByScore.Start(ctx)
	defer func() { err = call.End(err) }()
	l, err := b.ready(ctx)
	if err != nil {
		return 0, err
	}
	lo, hi, err := b.storedRange(minScore, maxScore, "remove range")
	if err != nil {
		return 0, err
	}
	return b.removeBetween(ctx, l, Entry{value: lo}, Entry{value: hi})
}

// RemoveRangeByRank removes the members from position start to stop,
// inclusive, 1-based in the board's order over all shards — positions,
// that is Ordinal ranks, in every Ties mode, as ZREMRANGEBYRANK counts —
// with their metadata, and returns how many it removed. A stop beyond the
// board's size removes to its end: RemoveRangeByRank(ctx, 101, math.MaxInt64)
// keeps the top 100.
//
// It finds the two boundary entries, then removes by (value, member) bounds
// on every shard, one atomic script call per shard, pipelined (as
// RemoveRangeByScore). Cost: one round trip for the board's ends; a
// boundary that is neither end costs, on a one-shard board, one ZREVRANGE,
// on a sharded one a bisection over the values between the ends (at most
// 55 round trips of one ZCOUNT per shard), then reading the members tied
// at the boundary's score down to it. The steps are not one snapshot: a
// write landing between them moves the boundaries by the entries it moves.
func (b *Board) RemoveRangeByRank(ctx context.Context, start, stop int64) (_ int64, err error) {
	ctx, call := b.obs.removeByRank.Start(ctx)
	defer func() { err = call.End(err) }()
	if start < 1 || stop < start {
		return 0, fmt.Errorf("%w: remove positions %d..%d: need 1 ≤ start ≤ stop", ErrInvalid, start, stop)
	}
	l, err := b.ready(ctx)
	if err != nil {
		return 0, err
	}
	ends, err := b.ends(ctx)
	if err != nil {
		return 0, err
	}
	if start > ends.size {
		return 0, nil
	}
	high, err := b.at(ctx, start, ends)
	if err != nil {
		return 0, err
	}
	low, err := b.at(ctx, min(stop, ends.size), ends)
	if err != nil {
		return 0, err
	}
	return b.removeBetween(ctx, l, low, high)
}

// removeBetween removes, on every shard, the entries from low to high in
// Redis' ascending order, both included; a bound with key "" stands for
// every member at its value.
func (b *Board) removeBetween(ctx context.Context, l Encoding, low, high Entry) (int64, error) {
	shards := allShards(len(b.shards))
	var n int64
	for len(shards) > 0 {
		skip, id := prefixLen, b.memberID
		if l == EncodingPacked {
			skip, id = 0, b.packed.id
		}
		calls := make([]luascript.Call, len(shards))
		for j, i := range shards {
			m := b.mig[i]
			calls[j] = luascript.Call{
				Script: removeRangeScript,
				Keys:   []string{b.shards[i], b.ties[i], b.meta[i], b.encoded[i], m.rank, m.ties},
				Args:   []any{low.value, low.key, high.value, high.key, skip, id},
			}
		}
		cmds, _ := luascript.RunAll(ctx, b.c, calls)
		var stale []int
		for j, cmd := range cmds {
			k, err := cmd.Int64()
			switch {
			case isMismatch(err) && l == EncodingPacked:
				stale = append(stale, shards[j]) // switched by Migrate: nothing removed there yet
			case isMismatch(err):
				return 0, fmt.Errorf("%w: %v", ErrEncodingMismatch, err)
			case err != nil:
				return 0, fmt.Errorf("rank: remove range from %s: %w", b.cfg.Name, err)
			}
			n += k
		}
		if len(stale) > 0 {
			var err error
			if l, err = b.switched(ctx); err != nil {
				return n, err
			}
			// The same bounds, as Migrate converted the entries.
			low, high = b.asMember(low), b.asMember(high)
		}
		shards = stale
	}
	return n, nil
}

// boardEnds is a board's size and its first and last entries.
type boardEnds struct {
	size        int64
	first, last Entry
}

// ends reads every shard's first and last entry and size, in one round
// trip.
func (b *Board) ends(ctx context.Context) (boardEnds, error) {
	pipe := b.c.Pipeline()
	firsts := make([]*redis.ZSliceCmd, len(b.shards))
	lasts := make([]*redis.ZSliceCmd, len(b.shards))
	sizes := make([]*redis.IntCmd, len(b.shards))
	for i, key := range b.shards {
		firsts[i] = pipe.ZRevRangeWithScores(ctx, key, 0, 0)
		lasts[i] = pipe.ZRangeWithScores(ctx, key, 0, 0)
		sizes[i] = pipe.ZCard(ctx, key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return boardEnds{}, fmt.Errorf("rank: ends of %s: %w", b.cfg.Name, err)
	}
	var e boardEnds
	for i := range b.shards {
		f, err1 := b.zEntries(firsts[i].Val())
		l, err2 := b.zEntries(lasts[i].Val())
		if err1 != nil || err2 != nil {
			return boardEnds{}, fmt.Errorf("rank: ends of %s: %v", b.cfg.Name, firsts[i].Val())
		}
		if len(f) == 0 || len(l) == 0 {
			continue
		}
		if e.size == 0 || before(f[0], e.first) {
			e.first = f[0]
		}
		if e.size == 0 || before(e.last, l[0]) {
			e.last = l[0]
		}
		e.size += sizes[i].Val()
	}
	return e, nil
}

// at finds the entry at position k (1..ends.size) of the board.
func (b *Board) at(ctx context.Context, k int64, ends boardEnds) (Entry, error) {
	switch {
	case k == 1:
		return ends.first, nil
	case k == ends.size:
		return ends.last, nil
	case len(b.shards) == 1:
		zs, err := b.c.ZRevRangeWithScores(ctx, b.shards[0], k-1, k-1).Result()
		if err != nil {
			return Entry{}, fmt.Errorf("rank: position %d of %s: %w", k, b.cfg.Name, err)
		}
		es, err := b.zEntries(zs)
		if err != nil || len(es) != 1 {
			return Entry{}, fmt.Errorf("rank: position %d of %s: the board changed while read (%v)", k, b.cfg.Name, err)
		}
		return es[0], nil
	}
	// The value at position k is the greatest v that at least k entries
	// reach: bisect between the ends' values.
	lo, hi := ends.last.value, ends.first.value
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		n, err := b.countRange(ctx, strconv.FormatInt(mid, 10), "+inf")
		if err != nil {
			return Entry{}, err
		}
		if n >= k {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	above, err := b.countAbove(ctx, lo)
	if err != nil {
		return Entry{}, err
	}
	// Then walk the entries at that value, in order, to the one at k.
	from, left := Entry{value: lo + 1}, k-above
	for left > 0 {
		es, _, err := b.after(ctx, from, int(min(left, 1000)), lo)
		if err != nil {
			return Entry{}, err
		}
		if len(es) == 0 {
			return Entry{}, fmt.Errorf("rank: position %d of %s: the board changed while read", k, b.cfg.Name)
		}
		if left <= int64(len(es)) {
			return es[left-1], nil
		}
		left -= int64(len(es))
		from = es[len(es)-1]
	}
	return Entry{}, fmt.Errorf("rank: position %d of %s: the board changed while read", k, b.cfg.Name)
}
