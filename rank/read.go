package rank

import (
	"context"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/shard"
)

var (
	//go:embed lookup.lua
	lookupLua    string
	lookupScript = redis.NewScript(lookupLua)
)

func isNil(err error) bool { return errors.Is(err, redis.Nil) }

func msTime(ms int64) time.Time { return time.UnixMilli(ms) }

// Score returns member's score and when it was reached (Rank left 0).
func (b *Board) Score(ctx context.Context, member string) (_ Entry, err error) {
	ctx, call := b.obs.score.Start(ctx)
	defer func() { err = call.End(err) }()
	var h found
	err = b.settled(ctx, func(Encoding) (err error) {
		h, err = b.home(ctx, member)
		return err
	})
	return h.e, err
}

// found is a member found on its shard.
type found struct {
	e     Entry
	ahead int64 // entries ranked before it on its shard
	size  int64 // its shard's entries
	above int64 // entries with a greater value on its shard (EncodingMember only)
}

// home finds member on its shard, in one round trip.
func (b *Board) home(ctx context.Context, member string) (found, error) {
	l, err := b.ready(ctx)
	if err != nil {
		return found{}, err
	}
	s := b.shardOf(member)
	if l == EncodingPacked {
		pipe := b.c.Pipeline()
		score := pipe.ZScore(ctx, b.shards[s], member)
		rank := pipe.ZRevRank(ctx, b.shards[s], member)
		size := pipe.ZCard(ctx, b.shards[s])
		_, err := pipe.Exec(ctx)
		if isNil(err) {
			return found{}, fmt.Errorf("%w: %q", ErrNotFound, member)
		}
		if err != nil {
			return found{}, fmt.Errorf("rank: find %q: %w", member, err)
		}
		e, _ := b.decode(member, score.Val())
		return found{e: e, ahead: rank.Val(), size: size.Val()}, nil
	}
	r, err := lookupScript.Run(ctx, b.c, []string{b.shards[s], b.ties[s]}, member).Slice()
	if isNil(err) {
		return found{}, fmt.Errorf("%w: %q", ErrNotFound, member)
	}
	if err != nil {
		return found{}, fmt.Errorf("rank: find %q: %w", member, err)
	}
	key, _ := r[0].(string)
	value, _ := r[1].(string)
	f, err := strconv.ParseFloat(value, 64)
	e, ok := b.decode(key, f)
	if err != nil || !ok || len(r) != 5 {
		return found{}, fmt.Errorf("rank: find %q: unexpected reply %v", member, r)
	}
	h := found{e: e}
	h.ahead, _ = r[2].(int64)
	h.size, _ = r[3].(int64)
	h.above, _ = r[4].(int64)
	return h, nil
}

// Rank returns member's entry with its exact rank across all shards,
// numbered as Config.Ties says: Ordinal, 1 + the members ahead of it
// (higher score, or the same score reached earlier); Competition, 1 + the
// members with a better score; Dense, 1 + the distinct better scores.
//
// A one-shard board answers in one round trip (one script call: the
// member's stored form, score, rank and the count above it). A sharded one
// finds the member, then asks every shard in one more round trip, pipelined
// (go-redis sends each cluster node its share in parallel), for its
// standing relative to the member: one position.lua call per shard. Dense
// ranks then list, on every shard, the distinct scores better than the
// member's and merge them: exact, at a cost in proportion to their number
// (O(D log n) on the servers, D/1000 + 1 more round trips) — cheap near the
// top or on boards of few distinct scores, costly deep in a board of
// millions of distinct scores.
func (b *Board) Rank(ctx context.Context, member string) (_ Entry, err error) {
	ctx, call := b.obs.rank.Start(ctx)
	defer func() { err = call.End(err) }()
	return b.standing(ctx, member)
}

// standing is Rank's work.
func (b *Board) standing(ctx context.Context, member string) (e Entry, err error) {
	err = b.settled(ctx, func(Encoding) (err error) {
		e, err = b.standingAsRead(ctx, member)
		return err
	})
	return e, err
}

// standingAsRead is standing in the encoding read last.
func (b *Board) standingAsRead(ctx context.Context, member string) (Entry, error) {
	h, err := b.home(ctx, member)
	if err != nil {
		return Entry{}, err
	}
	e := h.e
	ahead, above := h.ahead, h.above
	if len(b.shards) > 1 {
		q := newBatch(ctx)
		ps := q.probeAll(b, e, 0, 0)
		if err := q.run(b.c); err != nil {
			return Entry{}, fmt.Errorf("rank: rank in %s: %w", b.cfg.Name, err)
		}
		ahead, above = 0, 0
		for _, p := range ps {
			ahead += p.ahead
			above += p.above
		}
	}
	e.ordinal = 1 + ahead
	switch b.cfg.Ties {
	case Ordinal:
		e.Rank = e.ordinal
	case Competition:
		e.Rank = 1 + above
	case Dense:
		d, err := b.distinctAbove(ctx, e.value)
		if err != nil {
			return Entry{}, err
		}
		e.Rank = 1 + d
	}
	return e, nil
}

// rankOf returns the rank of e, whose Ordinal rank is known, numbered as
// Config.Ties says: one more round trip for Competition and Dense.
func (b *Board) rankOf(ctx context.Context, e Entry) (int64, error) {
	switch b.cfg.Ties {
	case Competition:
		n, err := b.countAbove(ctx, e.value)
		return 1 + n, err
	case Dense:
		n, err := b.distinctAbove(ctx, e.value)
		return 1 + n, err
	}
	return e.ordinal, nil
}

// follow numbers next, the entry ranked right after prev.
func (b *Board) follow(prev Entry, next *Entry) {
	next.ordinal = prev.ordinal + 1
	switch {
	case b.cfg.Ties != Ordinal && next.value == prev.value:
		next.Rank = prev.Rank
	case b.cfg.Ties == Dense:
		next.Rank = prev.Rank + 1
	default:
		next.Rank = next.ordinal
	}
}

// numbered numbers es, consecutive in rank order, from es[0], whose
// ordinal rank is given; it reads es[0]'s rank when the Ties mode needs it.
func (b *Board) numbered(ctx context.Context, es []Entry, ordinal int64) ([]Entry, error) {
	if len(es) == 0 {
		return es, nil
	}
	es[0].ordinal, es[0].Rank = ordinal, 1 // rank 1 in every mode
	if ordinal > 1 {
		r, err := b.rankOf(ctx, es[0])
		if err != nil {
			return nil, err
		}
		es[0].Rank = r
	}
	b.numberAfter(es[0], es[1:])
	return es, nil
}

// numberAfter numbers es, which follow prev in rank order.
func (b *Board) numberAfter(prev Entry, es []Entry) {
	for i := range es {
		b.follow(prev, &es[i])
		prev = es[i]
	}
}

// Around returns member's entry and its neighbours: k above and k below
// when the board has them. Near either end the window shifts inwards and
// stays 2k+1 entries long, as podium's does: around the first member with
// k = 10 come ranks 1 to 21, around the last one the last 21. A board of at
// most 2k+1 members comes back whole.
//
// A one-shard board answers as podium does, in two round trips: the
// member's rank and the board's size, then the window by index. A sharded
// one finds the member, then, in one more round trip, asks every shard for
// its standing and its few (2k/shards + 2) entries nearest to the member on
// either side. Only the shards whose last entry still made the cut are asked
// for more, in a third round trip. The window is the same as a single
// sorted set's. Competition and Dense ranks cost what Rank's do, once, for
// the window's first entry.
//
// The round trips are not one snapshot: a write landing between them can
// shift the window by the entries it moves.
func (b *Board) Around(ctx context.Context, member string, k int) (_ []Entry, err error) {
	ctx, call := b.obs.around.Start(ctx)
	defer func() { err = call.End(err) }()
	if k < 0 || k > 1000 {
		return nil, fmt.Errorf("%w: around %d is outside 0..1000", ErrInvalid, k)
	}
	var out []Entry
	err = b.settled(ctx, func(Encoding) (err error) {
		out, err = b.around(ctx, member, k)
		return err
	})
	return out, err
}

// around is Around's work, in the encoding read last.
func (b *Board) around(ctx context.Context, member string, k int) ([]Entry, error) {
	h, err := b.home(ctx, member)
	if err != nil {
		return nil, err
	}
	var out []Entry
	var first int64
	if len(b.shards) == 1 {
		out, first, err = b.aroundOneShard(ctx, h, k)
	} else {
		out, first, err = b.aroundShards(ctx, h.e, k)
	}
	if err == nil {
		out, err = b.numbered(ctx, out, first)
	}
	if err != nil {
		return nil, fmt.Errorf("rank: around in %s: %w", b.cfg.Name, err)
	}
	return out, nil
}

// aroundShards reads every shard's standing and entries around e, then more
// from the shards whose last entry made the cut. It returns the window and
// its first entry's ordinal rank.
func (b *Board) aroundShards(ctx context.Context, e Entry, k int) ([]Entry, int64, error) {
	per := 2*k/len(b.shards) + 2
	q := newBatch(ctx)
	ps := q.probeAll(b, e, per, per)
	if err := q.run(b.c); err != nil {
		return nil, 0, err
	}
	up, down := newSide(len(b.shards), true, e), newSide(len(b.shards), false, e)
	var ahead, size int64
	for i, p := range ps {
		ahead += p.ahead
		size += p.size
		up.take(i, p, per)
		down.take(i, p, per)
	}
	behind := max(0, size-ahead-1)
	// Entries needed on each side: k, and at an end of the board what the
	// other side lacks.
	needUp := int(min(ahead, int64(k)+max(0, int64(k)-behind)))
	needDown := int(min(behind, int64(k)+max(0, int64(k)-ahead)))
	up.askMore(q, b, needUp)
	down.askMore(q, b, needDown)
	if err := q.run(b.c); err != nil {
		return nil, 0, err
	}
	up.collect()
	down.collect()
	above, below := up.nearest(needUp), down.nearest(needDown)
	na := min(len(above), k+max(0, k-len(below)))
	nb := min(len(below), k+max(0, k-na))
	out := make([]Entry, 0, na+1+nb)
	for i := na - 1; i >= 0; i-- {
		out = append(out, above[i])
	}
	out = append(out, e)
	out = append(out, below[:nb]...)
	return out, 1 + ahead - int64(na), nil
}

// aroundOneShard is podium's sequence: the member's rank and the board's
// size (found by home), then the window by index (Redis' reverse order is
// the board's order).
func (b *Board) aroundOneShard(ctx context.Context, h found, k int) ([]Entry, int64, error) {
	start := max(0, min(h.ahead-int64(k), h.size-1-2*int64(k)))
	zs, err := b.c.ZRevRangeWithScores(ctx, b.shards[0], start, start+2*int64(k)).Result()
	if err != nil {
		return nil, 0, err
	}
	out, err := b.zEntries(zs)
	return out, start + 1, err
}

func (b *Board) zEntries(zs []redis.Z) ([]Entry, error) {
	out := make([]Entry, len(zs))
	for i, z := range zs {
		key, _ := z.Member.(string)
		e, ok := b.decode(key, z.Score)
		if !ok {
			return nil, fmt.Errorf("unexpected member %q", key)
		}
		out[i] = e
	}
	return out, nil
}

// Top returns the best n members (n ≤ 10,000). A sharded board first asks
// every shard for a few more than its fair share (2n/shards + 4), in one
// pipelined round trip, and merges; only shards whose last entry still made
// the cut — rare with a hash spread — are asked for the rest in a second one.
// The result is exactly the top n.
func (b *Board) Top(ctx context.Context, n int) (_ []Entry, err error) {
	ctx, call := b.obs.topOp.Start(ctx)
	defer func() { err = call.End(err) }()
	return b.top(ctx, n)
}

func (b *Board) top(ctx context.Context, n int) (out []Entry, err error) {
	if n < 0 || n > 10000 {
		return nil, fmt.Errorf("%w: top %d is outside 0..10000", ErrInvalid, n)
	}
	if n == 0 {
		return nil, nil
	}
	err = b.settled(ctx, func(Encoding) (err error) {
		out, err = b.topAsRead(ctx, n)
		return err
	})
	return out, err
}

// topAsRead is top in the encoding read last.
func (b *Board) topAsRead(ctx context.Context, n int) ([]Entry, error) {
	per := n
	if len(b.shards) > 1 {
		per = min(n, 2*n/len(b.shards)+4)
	}
	lists := make([][]Entry, len(b.shards))
	if err := b.fetchRanges(ctx, lists, allShards(len(b.shards)), per); err != nil {
		return nil, err
	}
	merged := shard.Merge(lists, before, n)
	if per < n {
		var more []int
		for i, l := range lists {
			if len(l) == per && (len(merged) < n || !before(merged[n-1], l[per-1])) {
				more = append(more, i)
			}
		}
		if len(more) > 0 {
			if err := b.fetchRanges(ctx, lists, more, n); err != nil {
				return nil, err
			}
			merged = shard.Merge(lists, before, n)
		}
	}
	return b.numbered(ctx, merged, 1)
}

// fetchRanges extends lists[i], for each i in shards, to the shard's best
// upTo entries, in one pipeline.
func (b *Board) fetchRanges(ctx context.Context, lists [][]Entry, shards []int, upTo int) error {
	pipe := b.c.Pipeline()
	cmds := make([]*redis.ZSliceCmd, len(shards))
	for j, i := range shards {
		cmds[j] = pipe.ZRevRangeWithScores(ctx, b.shards[i], int64(len(lists[i])), int64(upTo-1))
	}
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return fmt.Errorf("rank: top of %s: %w", b.cfg.Name, err)
	}
	for j, i := range shards {
		es, err := b.zEntries(cmds[j].Val())
		if err != nil {
			return fmt.Errorf("rank: top of %s: %w", b.cfg.Name, err)
		}
		lists[i] = append(lists[i], es...)
	}
	return nil
}

// Page returns n members after cursor ("" for the top) and the cursor of the
// next page ("" at the end). A cursor remembers the last member's place and
// rank: pages stay consistent with each other, but members that move between
// two calls may be seen twice or not at all, as with any cursor over live
// data.
func (b *Board) Page(ctx context.Context, cursor string, n int) (_ []Entry, _ string, err error) {
	ctx, call := b.obs.page.Start(ctx)
	defer func() { err = call.End(err) }()
	if n < 1 || n > 1000 {
		return nil, "", fmt.Errorf("%w: page size %d is outside 1..1000", ErrInvalid, n)
	}
	var page []Entry
	if cursor == "" {
		top, err := b.top(ctx, n)
		if err != nil {
			return nil, "", err
		}
		page = top
	} else {
		var last Entry
		err := b.settled(ctx, func(Encoding) (err error) {
			if last, err = b.decodeCursor(cursor); err != nil {
				return err
			}
			page, _, err = b.after(ctx, last, n, math.MinInt64)
			return err
		})
		if err != nil {
			return nil, "", err
		}
		b.numberAfter(last, page)
	}
	if len(page) < n {
		return page, "", nil
	}
	return page, b.encodeCursor(page[len(page)-1]), nil
}

func (b *Board) encodeCursor(e Entry) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorText(e)))
}

// cursorText is what a cursor remembers of its last entry: its place and
// rank.
func cursorText(e Entry) string {
	return strconv.FormatInt(e.value, 10) + ":" + strconv.FormatInt(e.ordinal, 10) + ":" + strconv.FormatInt(e.Rank, 10) + ":" + e.key
}

func (b *Board) decodeCursor(c string) (Entry, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	return b.parseCursor(string(raw))
}

// parseCursor reads cursorText's form back, refusing what no entry of this
// board could have left.
func (b *Board) parseCursor(raw string) (Entry, error) {
	parts := strings.SplitN(raw, ":", 4)
	if len(parts) != 4 {
		return Entry{}, ErrBadCursor
	}
	v, err1 := strconv.ParseInt(parts[0], 10, 64)
	o, err2 := strconv.ParseInt(parts[1], 10, 64)
	r, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || o < 1 || r < 1 || r > o || v < -maxScore-1 || v > maxScore+1 {
		return Entry{}, ErrBadCursor
	}
	e, ok := b.decode(parts[3], float64(v))
	if !ok || validMember(e.Member) != nil || b.isPacked() && v < 0 {
		return Entry{}, ErrBadCursor
	}
	e.ordinal, e.Rank = o, r
	return e, nil
}

// after returns the n entries ranked right after e whose value is at least
// floor — a few of every shard's nearest below it (as Top reads from the
// top), and more only from shards whose last entry made the cut — and the
// number of entries ranked before e.
func (b *Board) after(ctx context.Context, e Entry, n int, floor int64) ([]Entry, int64, error) {
	q := newBatch(ctx)
	down := newSide(len(b.shards), false, e)
	down.floor = floor
	per := min(n, 2*n/len(b.shards)+4)
	ps := q.probeAll(b, e, 0, per)
	if err := q.run(b.c); err != nil {
		return nil, 0, fmt.Errorf("rank: read %s below a place: %w", b.cfg.Name, err)
	}
	var ahead int64
	for i, p := range ps {
		ahead += p.ahead
		down.take(i, p, per)
	}
	down.askMore(q, b, n)
	if err := q.run(b.c); err != nil {
		return nil, 0, fmt.Errorf("rank: read %s below a place: %w", b.cfg.Name, err)
	}
	down.collect()
	return down.nearest(n), ahead, nil
}

// Size returns the number of members on the board.
func (b *Board) Size(ctx context.Context) (_ int64, err error) {
	ctx, call := b.obs.size.Start(ctx)
	defer func() { err = call.End(err) }()
	pipe := b.c.Pipeline()
	cmds := make([]*redis.IntCmd, len(b.shards))
	for i, key := range b.shards {
		cmds[i] = pipe.ZCard(ctx, key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("rank: size: %w", err)
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}
