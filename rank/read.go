package rank

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/luascript"
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
	p := newPosition(e)
	q := newBatch(ctx)
	at := q.standing(b, p)
	err = q.run(b.c)
	if err == nil {
		e.Rank, err = at.ahead(q, b, p)
		e.Rank++
	}
	if err != nil {
		return Entry{}, fmt.Errorf("rank: rank in %s: %w", b.cfg.Name, err)
	}
	return e, nil
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

// Around returns up to k members above member, member itself and up to k
// below it, ranked.
func (b *Board) Around(ctx context.Context, member string, k int) ([]Entry, error) {
	if k < 0 || k > 1000 {
		return nil, fmt.Errorf("rank: around %d is outside 0..1000", k)
	}
	e, err := b.Score(ctx, member)
	if err != nil {
		return nil, err
	}
	ns, err := b.neighbors(ctx, e, k, k)
	if err != nil {
		return nil, err
	}
	e.Rank = 1 + ns.ahead
	above := ns.above
	if len(above) > k {
		above = above[len(above)-k:] // the closest k
	}
	below := ns.below[:min(k, len(ns.below))]
	out := make([]Entry, 0, len(above)+1+len(below))
	out = append(out, above...)
	out = append(out, e)
	out = append(out, below...)
	first := e.Rank - int64(len(above))
	for i := range out {
		out[i].Rank = first + int64(i)
	}
	return out, nil
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
	all := make([]int, len(b.shards))
	for i := range all {
		all[i] = i
	}
	if err := b.fetchRanges(ctx, lists, all, per); err != nil {
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
		ns, err := b.neighbors(ctx, last, 0, n)
		if err != nil {
			return nil, "", err
		}
		page = ranked(ns.below[:min(n, len(ns.below))], last.Rank+1)
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

// neighborhood is what the shards say about a position.
type neighborhood struct {
	ahead int64   // entries ranked before the position
	above []Entry // the closest entries before it, in rank order (last is closest)
	below []Entry // the closest entries after it, in rank order
}

// neighbors asks every shard, in one pipeline, how many entries rank before
// e and for the na closest ones before it and nb after it.
func (b *Board) neighbors(ctx context.Context, e Entry, na, nb int) (neighborhood, error) {
	v := strconv.FormatUint(e.value, 10)
	calls := make([]luascript.Call, len(b.shards))
	for i, key := range b.shards {
		calls[i] = luascript.Call{Script: neighborsScript, Keys: []string{key}, Args: []any{v, na, nb}}
	}
	cmds, err := luascript.RunAll(ctx, b.c, calls)
	if err != nil {
		return neighborhood{}, fmt.Errorf("rank: neighbours in %s: %w", b.cfg.Name, err)
	}
	var ns neighborhood
	for _, cmd := range cmds {
		reply, ok := cmd.Val().([]any)
		if !ok || len(reply) != 4 {
			return neighborhood{}, fmt.Errorf("rank: unexpected reply %v", cmd.Val())
		}
		count, _ := reply[0].(int64)
		ns.ahead += count
		for _, m := range reply[1].([]any) { // equal values: member name decides
			x := b.entry(m.(string), e.value)
			switch {
			case x.Member > e.Member:
				ns.ahead++
				ns.above = append(ns.above, x)
			case x.Member < e.Member:
				ns.below = append(ns.below, x)
			}
		}
		ns.above = append(ns.above, b.pairs(reply[2])...)
		ns.below = append(ns.below, b.pairs(reply[3])...)
	}
	slices.SortFunc(ns.above, order)
	slices.SortFunc(ns.below, order)
	return ns, nil
}

func order(x, y Entry) int {
	switch {
	case before(x, y):
		return -1
	case before(y, x):
		return 1
	}
	return 0
}

// pairs decodes a WITHSCORES reply from a script: member, value, member, ….
func (b *Board) pairs(reply any) []Entry {
	flat, _ := reply.([]any)
	out := make([]Entry, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		v, _ := strconv.ParseFloat(flat[i+1].(string), 64)
		out = append(out, b.entry(flat[i].(string), uint64(v)))
	}
	return out
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
