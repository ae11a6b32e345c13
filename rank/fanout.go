package rank

import (
	"context"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/shard"
)

// A sharded read asks every shard the same plain commands in one pipeline,
// which go-redis sends to each cluster node in parallel. With 64 shards the
// cost is in those commands, so they are built with the shard keys boxed once
// (Board.keyArgs) and the bounds boxed once per read.

// batch is the commands of one pipelined round trip.
type batch struct {
	ctx  context.Context
	cmds []redis.Cmder
}

func newBatch(ctx context.Context) *batch { return &batch{ctx: ctx} }

func (q *batch) add(cmd redis.Cmder) { q.cmds = append(q.cmds, cmd) }

// run sends the queued commands; each command holds its own reply.
func (q *batch) run(c redis.UniversalClient) error {
	if len(q.cmds) == 0 {
		return nil
	}
	pipe := c.Pipeline()
	pipe.BatchProcess(q.ctx, q.cmds...)
	q.cmds = q.cmds[:0]
	_, err := pipe.Exec(q.ctx)
	return err
}

// position is a place on the board, between the entries ranked before e and
// those ranked after it, with e's value as command arguments.
type position struct {
	e      Entry
	at     any // "v": e's value, inclusive
	beyond any // "(v": e's value, exclusive
}

func newPosition(e Entry) position {
	v := strconv.FormatUint(e.value, 10)
	return position{e: e, at: v, beyond: "(" + v}
}

// standing counts, on every shard, the entries above a position's value
// and those at it — almost always none, or e itself. Members at one value
// rank by name, so a shard holding others at e's value is asked for their
// names: rarely, in one more round trip.
type standing struct {
	above []*redis.IntCmd // ZCOUNT (v +inf
	equal []*redis.IntCmd // ZCOUNT v v
}

func (q *batch) standing(b *Board, p position) standing {
	s := standing{above: make([]*redis.IntCmd, len(b.keyArgs)), equal: make([]*redis.IntCmd, len(b.keyArgs))}
	for i, key := range b.keyArgs {
		s.above[i] = redis.NewIntCmd(q.ctx, "zcount", key, p.beyond, "+inf")
		s.equal[i] = redis.NewIntCmd(q.ctx, "zcount", key, p.at, p.at)
		q.add(s.above[i])
		q.add(s.equal[i])
	}
	return s
}

// ahead is the number of entries ranked before p, once s has been read.
func (s standing) ahead(q *batch, b *Board, p position) (int64, error) {
	var n int64
	var tied []int
	home := b.shardOf(p.e.Member)
	for i, cmd := range s.above {
		n += cmd.Val()
		if eq := s.equal[i].Val(); eq > 1 || eq == 1 && i != home {
			tied = append(tied, i)
		}
	}
	if len(tied) == 0 {
		return n, nil
	}
	names := q.names(b, p, tied)
	if err := q.run(b.c); err != nil {
		return 0, err
	}
	for _, cmd := range names {
		for _, m := range cmd.Val() {
			if m > p.e.Member {
				n++
			}
		}
	}
	return n, nil
}

// names queues, on the given shards, ZRANGE of the members at p's value.
func (q *batch) names(b *Board, p position, shards []int) []*redis.StringSliceCmd {
	cmds := make([]*redis.StringSliceCmd, len(shards))
	for j, i := range shards {
		cmds[j] = redis.NewStringSliceCmd(q.ctx, "zrange", b.keyArgs[i], p.at, p.at, "byscore")
		q.add(cmds[j])
	}
	return cmds
}

// allShards is 0, 1, …, n-1.
func allShards(n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}

// aroundAll queues, on every shard, its entries around p by index, which
// the read standing gives: the members at p's value and per on either side.
func (q *batch) aroundAll(b *Board, s standing, per int64) []window {
	ws := make([]window, len(b.keyArgs))
	for i, key := range b.keyArgs {
		above, equal := s.above[i].Val(), s.equal[i].Val()
		start, stop := max(0, above-per), above+equal-1+per
		ws[i] = window{above: above, asked: int(stop - start + 1)}
		ws[i].cmd = redis.NewZSliceCmd(q.ctx, "zrevrange", key, start, stop, "withscores")
		q.add(ws[i].cmd)
	}
	return ws
}

// window is one shard's entries around a position, in rank order.
type window struct {
	cmd   *redis.ZSliceCmd
	above int64 // the shard's values above the position's
	asked int
}

// split hands the window's entries to the side of p they rank on, and
// returns how many of them rank before p at p's very value. Entries are
// placed by value and name, not by index, so a write between the count and
// the read cannot put one on the wrong side.
func (w window) split(b *Board, p position, i int, up, down *side) (tied int64) {
	zs := w.cmd.Val()
	var over, under int                 // entries beyond p's value, above and below
	for j := len(zs) - 1; j >= 0; j-- { // up, nearest first
		x := b.entry(zs[j].Member.(string), uint64(zs[j].Score))
		if before(x, p.e) {
			up.lists[i] = append(up.lists[i], x)
			if x.value == p.e.value {
				tied++
			} else {
				over++
			}
		}
	}
	for _, z := range zs {
		x := b.entry(z.Member.(string), uint64(z.Score))
		if before(p.e, x) {
			down.lists[i] = append(down.lists[i], x)
			if x.value != p.e.value {
				under++
			}
		}
	}
	up.read[i], up.more[i] = over, int64(over) < w.above
	down.read[i], down.more[i] = under, len(zs) == w.asked
	return tied
}

// side gathers the entries nearest to a position in one direction — up
// towards rank 1, or down — the way Top gathers them from the top: every
// shard is asked for a few, and only shards whose last entry still makes the
// cut are asked for more.
type side struct {
	up    bool
	lists [][]Entry          // per shard, nearest first: members at the position's value, then beyond it
	read  []int              // per shard, entries beyond the value read so far
	asked []int              // per shard, how many the read in flight asks for
	more  []bool             // per shard, whether the last read came back full
	cmds  []*redis.ZSliceCmd // per shard, the read in flight
}

func newSide(shards int, up bool) *side {
	return &side{
		up:    up,
		lists: make([][]Entry, shards),
		read:  make([]int, shards),
		asked: make([]int, shards),
		more:  make([]bool, shards),
		cmds:  make([]*redis.ZSliceCmd, shards),
	}
}

// nearer reports whether x is nearer to the position than y.
func (s *side) nearer(x, y Entry) bool {
	if s.up {
		return before(y, x)
	}
	return before(x, y)
}

// ask queues a read of up to n more of shard i's entries beyond p's value,
// nearest first.
func (s *side) ask(q *batch, b *Board, p position, i, n int) {
	key := b.keyArgs[i]
	if s.up {
		s.cmds[i] = redis.NewZSliceCmd(q.ctx, "zrange", key, p.beyond, "+inf", "byscore", "limit", s.read[i], n, "withscores")
	} else {
		s.cmds[i] = redis.NewZSliceCmd(q.ctx, "zrange", key, p.beyond, "-inf", "byscore", "rev", "limit", s.read[i], n, "withscores")
	}
	s.asked[i] = n
	q.add(s.cmds[i])
}

// askAll queues a read of n entries on every shard.
func (s *side) askAll(q *batch, b *Board, p position, n int) {
	for i := range s.lists {
		s.ask(q, b, p, i, n)
	}
}

// placeTied adds to a down side the members at p's value that rank after
// it: those with a smaller name, nearest (greatest) first. Call it before
// the first collect: they are nearer than any entry below the value.
func (s *side) placeTied(b *Board, p position, names []*redis.StringSliceCmd) {
	for i, cmd := range names {
		ns := cmd.Val() // ascending
		for j := len(ns) - 1; j >= 0; j-- {
			if ns[j] < p.e.Member {
				s.lists[i] = append(s.lists[i], b.entry(ns[j], p.e.value))
			}
		}
	}
}

// collect appends what the reads in flight returned.
func (s *side) collect(b *Board) {
	for i, cmd := range s.cmds {
		if cmd == nil {
			continue
		}
		zs := cmd.Val()
		for _, z := range zs {
			s.lists[i] = append(s.lists[i], b.entry(z.Member.(string), uint64(z.Score)))
		}
		s.read[i] += len(zs)
		s.more[i] = len(zs) == s.asked[i]
		s.cmds[i] = nil
	}
}

// nearest merges the n entries nearest to the position, nearest first.
func (s *side) nearest(n int) []Entry {
	if n <= 0 {
		return nil
	}
	return shard.Merge(s.lists, s.nearer, n)
}

// known is how many entries have been read on this side.
func (s *side) known() int {
	n := 0
	for _, l := range s.lists {
		n += len(l)
	}
	return n
}

// askMore queues the reads that the n entries nearest to p still need, after
// which they are exact: a shard whose read came back full and whose last
// entry made the cut may hold more of it — as many as the cut has places
// after that entry.
func (s *side) askMore(q *batch, b *Board, p position, n int) {
	if n <= 0 {
		return
	}
	cut := s.nearest(n)
	for i, l := range s.lists {
		if !s.more[i] {
			continue
		}
		if len(l) == 0 { // only when a write moved entries between reads
			s.ask(q, b, p, i, n)
			continue
		}
		last := l[len(l)-1]
		if at := sort.Search(len(cut), func(j int) bool { return !s.nearer(cut[j], last) }); at < n-1 {
			s.ask(q, b, p, i, n-1-at)
		}
	}
}
