package rank

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/shard"
)

func isNil(err error) bool { return errors.Is(err, redis.Nil) }

func msTime(ms int64) time.Time { return time.UnixMilli(ms) }

// Score returns member's score and when it was reached (Rank left 0).
func (b *Board) Score(ctx context.Context, member string) (Entry, error) {
	if err := b.checkEncoding(ctx); err != nil {
		return Entry{}, err
	}
	return b.score(ctx, member)
}

func (b *Board) score(ctx context.Context, member string) (Entry, error) {
	v, err := b.c.ZScore(ctx, b.shards[b.shardOf(member)], member).Result()
	if isNil(err) {
		return Entry{}, fmt.Errorf("%w: %q", ErrNotFound, member)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("rank: score: %w", err)
	}
	return b.entry(member, uint64(v)), nil
}

// Rank returns member's entry with its exact 1-based rank across all shards:
// 1 + the members ahead of it.
//
// A one-shard board answers in one round trip (ZSCORE and ZREVRANK,
// pipelined: Redis' reverse order is the board's order, ties included). A
// sharded one reads the score, then asks every shard in one more round trip
// of plain pipelined commands — which go-redis sends to each cluster node in
// parallel — how many values are above it and how many equal it (two
// ZCOUNTs). Equal values rank by member name, so the rare shards holding
// another member at the very same value are asked for names, in a third.
func (b *Board) Rank(ctx context.Context, member string) (Entry, error) {
	if err := b.checkEncoding(ctx); err != nil {
		return Entry{}, err
	}
	if len(b.shards) == 1 {
		return b.rankOneShard(ctx, member)
	}
	e, err := b.score(ctx, member)
	if err != nil {
		return Entry{}, err
	}
	ahead, err := b.ahead(ctx, newPosition(e))
	if err != nil {
		return Entry{}, fmt.Errorf("rank: rank in %s: %w", b.cfg.Name, err)
	}
	e.Rank = 1 + ahead
	return e, nil
}

// ahead counts the entries ranked before p on every shard.
func (b *Board) ahead(ctx context.Context, p position) (int64, error) {
	q := newBatch(ctx)
	at := q.standing(b, p)
	if err := q.run(b.c); err != nil {
		return 0, err
	}
	return at.ahead(q, b, p)
}

// rankOneShard reads score and rank in one round trip.
func (b *Board) rankOneShard(ctx context.Context, member string) (Entry, error) {
	pipe := b.c.Pipeline()
	score := pipe.ZScore(ctx, b.shards[0], member)
	rank := pipe.ZRevRank(ctx, b.shards[0], member)
	_, err := pipe.Exec(ctx)
	if isNil(err) {
		return Entry{}, fmt.Errorf("%w: %q", ErrNotFound, member)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("rank: rank: %w", err)
	}
	e := b.entry(member, uint64(score.Val()))
	e.Rank = 1 + rank.Val()
	return e, nil
}

// Around returns member's entry and its neighbours: k above and k below
// when the board has them. Near either end the window shifts inwards and
// stays 2k+1 entries long, as podium's does: around the first member with
// k = 10 come ranks 1 to 21, around the last one the last 21. A board of at
// most 2k+1 members comes back whole.
//
// A one-shard board answers as podium does, in two round trips: the
// member's rank and the board's size, then the window by index. A sharded
// one reads the member's score and its standing on every shard as Rank
// does, then, in one more round trip, every shard's entries around that
// spot by index: its few (2k/shards + 2) on either side. Only the shards
// whose last entry still made the cut are asked for more, in a fourth round
// trip. The window is the same as a single sorted set's.
//
// The round trips are not one snapshot: a write landing between them can
// shift the window by the entries it moves.
func (b *Board) Around(ctx context.Context, member string, k int) ([]Entry, error) {
	if k < 0 || k > 1000 {
		return nil, fmt.Errorf("rank: around %d is outside 0..1000", k)
	}
	if err := b.checkEncoding(ctx); err != nil {
		return nil, err
	}
	if len(b.shards) == 1 {
		return b.aroundOneShard(ctx, member, k)
	}
	e, err := b.score(ctx, member)
	if err != nil {
		return nil, err
	}
	out, err := b.aroundShards(ctx, e, k)
	if err != nil {
		return nil, fmt.Errorf("rank: around in %s: %w", b.cfg.Name, err)
	}
	return out, nil
}

// aroundShards reads e's standing as Rank does, then every shard's entries
// around that spot, then more from the shards whose last entry made the cut.
func (b *Board) aroundShards(ctx context.Context, e Entry, k int) ([]Entry, error) {
	p := newPosition(e)
	if k == 0 {
		ahead, err := b.ahead(ctx, p)
		return ranked([]Entry{e}, 1+ahead), err
	}
	q := newBatch(ctx)
	at := q.standing(b, p)
	if err := q.run(b.c); err != nil {
		return nil, err
	}
	windows := q.aroundAll(b, at, int64(2*k/len(b.shards)+2))
	if err := q.run(b.c); err != nil {
		return nil, err
	}
	up, down := newSide(len(b.shards), true), newSide(len(b.shards), false)
	var ahead int64
	for i, w := range windows {
		ahead += w.above + w.split(b, p, i, up, down)
	}
	// Entries needed on each side: k, and at an end of the board what the
	// other side lacks. The count above is exact; the one below is a lower
	// bound, which may ask for more above than needed, never fewer.
	needDown := k + max(0, k-int(ahead))
	needUp := min(int(ahead), k+max(0, k-down.known()))
	up.askMore(q, b, p, needUp)
	down.askMore(q, b, p, needDown)
	if err := q.run(b.c); err != nil {
		return nil, err
	}
	up.collect(b)
	down.collect(b)
	above, below := up.nearest(needUp), down.nearest(needDown)
	na := min(len(above), k+max(0, k-len(below)))
	nb := min(len(below), k+max(0, k-na))
	out := make([]Entry, 0, na+1+nb)
	for i := na - 1; i >= 0; i-- {
		out = append(out, above[i])
	}
	out = append(out, e)
	out = append(out, below[:nb]...)
	return ranked(out, 1+ahead-int64(na)), nil
}

// aroundOneShard is podium's sequence: the member's rank and the board's
// size, pipelined, then the window by index (Redis' reverse order is the
// board's order).
func (b *Board) aroundOneShard(ctx context.Context, member string, k int) ([]Entry, error) {
	key := b.shards[0]
	pipe := b.c.Pipeline()
	rank := pipe.ZRevRank(ctx, key, member)
	size := pipe.ZCard(ctx, key)
	_, err := pipe.Exec(ctx)
	if isNil(err) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, member)
	}
	if err != nil {
		return nil, fmt.Errorf("rank: around: %w", err)
	}
	start := max(0, min(rank.Val()-int64(k), size.Val()-1-2*int64(k)))
	zs, err := b.c.ZRevRangeWithScores(ctx, key, start, start+2*int64(k)).Result()
	if err != nil {
		return nil, fmt.Errorf("rank: around: %w", err)
	}
	out := make([]Entry, len(zs))
	for i, z := range zs {
		out[i] = b.entry(z.Member.(string), uint64(z.Score))
	}
	return ranked(out, start+1), nil
}

// Top returns the best n members (n ≤ 10,000). A sharded board first asks
// every shard for a few more than its fair share (2n/shards + 4), in one
// pipelined round trip, and merges; only shards whose last entry still made
// the cut — rare with a hash spread — are asked for the rest in a second one.
// The result is exactly the top n.
func (b *Board) Top(ctx context.Context, n int) ([]Entry, error) {
	if n < 0 || n > 10000 {
		return nil, fmt.Errorf("rank: top %d is outside 0..10000", n)
	}
	if n == 0 {
		return nil, nil
	}
	if err := b.checkEncoding(ctx); err != nil {
		return nil, err
	}
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
	return ranked(merged, 1), nil
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
		for _, z := range cmds[j].Val() {
			lists[i] = append(lists[i], b.entry(z.Member.(string), uint64(z.Score)))
		}
	}
	return nil
}

// Page returns n members after cursor ("" for the top) and the cursor of the
// next page ("" at the end). A cursor remembers the last member's value and
// rank: pages stay consistent with each other, but members that move between
// two calls may be seen twice or not at all, as with any cursor over live
// data.
func (b *Board) Page(ctx context.Context, cursor string, n int) ([]Entry, string, error) {
	if n < 1 || n > 1000 {
		return nil, "", fmt.Errorf("rank: page size %d is outside 1..1000", n)
	}
	var page []Entry
	if cursor == "" {
		top, err := b.Top(ctx, n)
		if err != nil {
			return nil, "", err
		}
		page = top
	} else {
		last, err := b.decodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		if err := b.checkEncoding(ctx); err != nil {
			return nil, "", err
		}
		below, err := b.after(ctx, last, n)
		if err != nil {
			return nil, "", err
		}
		page = ranked(below, last.Rank+1)
	}
	if len(page) < n {
		return page, "", nil
	}
	return page, b.encodeCursor(page[len(page)-1]), nil
}

func ranked(es []Entry, first int64) []Entry {
	for i := range es {
		es[i].Rank = first + int64(i)
	}
	return es
}

func (b *Board) encodeCursor(e Entry) string {
	raw := strconv.FormatUint(e.value, 10) + ":" + strconv.FormatInt(e.Rank, 10) + ":" + e.Member
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func (b *Board) decodeCursor(c string) (Entry, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 || parts[2] == "" || len(parts[2]) > maxMember {
		return Entry{}, ErrBadCursor
	}
	v, err1 := strconv.ParseUint(parts[0], 10, 64)
	r, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || r < 1 || v >= b.span<<(53-b.timeBits) {
		return Entry{}, ErrBadCursor
	}
	e := b.entry(parts[2], v)
	e.Rank = r
	return e, nil
}

// after returns the n entries ranked right after e: members at e's value
// with a smaller name, then a few of every shard's values below it (as Top
// reads from the top), and more only from shards whose last entry made the
// cut.
func (b *Board) after(ctx context.Context, e Entry, n int) ([]Entry, error) {
	p := newPosition(e)
	q := newBatch(ctx)
	down := newSide(len(b.shards), false)
	equal := q.names(b, p, allShards(len(b.shards)))
	down.askAll(q, b, p, min(n, 2*n/len(b.shards)+4))
	if err := q.run(b.c); err != nil {
		return nil, fmt.Errorf("rank: page of %s: %w", b.cfg.Name, err)
	}
	down.placeTied(b, p, equal)
	down.collect(b)
	down.askMore(q, b, p, n)
	if err := q.run(b.c); err != nil {
		return nil, fmt.Errorf("rank: page of %s: %w", b.cfg.Name, err)
	}
	down.collect(b)
	return down.nearest(n), nil
}

// Size returns the number of members on the board.
func (b *Board) Size(ctx context.Context) (int64, error) {
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
