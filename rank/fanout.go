package rank

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/luascript"
	"github.com/casebook-dev/casebook/shard"
)

var (
	//go:embed position.lua
	positionLua    string
	positionScript = redis.NewScript(orderLua + positionLua)
	//go:embed distinct.lua
	distinctLua    string
	distinctScript = redis.NewScript(distinctLua)
)

// A sharded read asks every shard in one pipeline, which go-redis sends to
// each cluster node in parallel. Reads that start at a member's place ask
// each shard with position.lua: Redis has no command that finds the place
// of (value, member) among members at one value on a shard that does not
// hold that member (ZLEXCOUNT needs a set of equal values), so the script
// searches it by index, O(log² n).

// batch is the script calls of one pipelined round trip.
type batch struct {
	ctx   context.Context
	calls []luascript.Call
	parse []func(*redis.Cmd) error
}

func newBatch(ctx context.Context) *batch { return &batch{ctx: ctx} }

func (q *batch) add(call luascript.Call, parse func(*redis.Cmd) error) {
	q.calls = append(q.calls, call)
	q.parse = append(q.parse, parse)
}

// run sends the queued calls and parses every reply.
func (q *batch) run(c redis.UniversalClient) error {
	if len(q.calls) == 0 {
		return nil
	}
	cmds, err := luascript.RunAll(q.ctx, c, q.calls)
	if err != nil {
		return err
	}
	parse := q.parse
	q.calls, q.parse = q.calls[:0], nil
	for i, cmd := range cmds {
		if err := parse[i](cmd); err != nil {
			return err
		}
	}
	return nil
}

// probe is one shard's reply to position.lua: its standing relative to a
// position and its entries nearest to it.
type probe struct {
	ahead int64   // entries ranked before the position
	above int64   // entries with a greater value
	size  int64   // the shard's entries
	up    []Entry // nearest first, towards rank 1
	down  []Entry // nearest first, away from rank 1
}

// probe queues position.lua on shard i at (at.value, at.key).
func (q *batch) probe(b *Board, i int, at Entry, nUp, nDown int) *probe {
	p := &probe{}
	call := luascript.Call{Script: positionScript, Keys: []string{b.shards[i]}, Args: []any{at.value, at.key, nUp, nDown}}
	q.add(call, func(cmd *redis.Cmd) error {
		r, err := cmd.Slice()
		if err != nil || len(r) != 5 {
			return fmt.Errorf("position reply %v: %v", cmd.Val(), err)
		}
		var ok [3]bool
		p.ahead, ok[0] = r[0].(int64)
		p.above, ok[1] = r[1].(int64)
		p.size, ok[2] = r[2].(int64)
		if !ok[0] || !ok[1] || !ok[2] {
			return fmt.Errorf("position reply %v", r)
		}
		if p.up, err = b.entries(r[3]); err != nil {
			return err
		}
		p.down, err = b.entries(r[4])
		return err
	})
	return p
}

// probeAll queues position.lua on every shard.
func (q *batch) probeAll(b *Board, at Entry, nUp, nDown int) []*probe {
	ps := make([]*probe, len(b.shards))
	for i := range b.shards {
		ps[i] = q.probe(b, i, at, nUp, nDown)
	}
	return ps
}

// entries decodes a script's flat member, value list.
func (b *Board) entries(v any) ([]Entry, error) {
	flat, _ := v.([]any)
	out := make([]Entry, 0, len(flat)/2)
	for j := 0; j+1 < len(flat); j += 2 {
		key, _ := flat[j].(string)
		s, _ := flat[j+1].(string)
		f, err := strconv.ParseFloat(s, 64)
		e, ok := b.decode(key, f)
		if err != nil || !ok {
			return nil, fmt.Errorf("unexpected entry %q %q", key, s)
		}
		out = append(out, e)
	}
	return out, nil
}

// side gathers the entries nearest to a position in one direction — up
// towards rank 1, or down — the way Top gathers them from the top: every
// shard is asked for a few, and only shards whose last entry still makes the
// cut are asked for more, from that entry on.
type side struct {
	up    bool
	from  Entry     // the position
	floor int64     // going down, the lowest value wanted
	lists [][]Entry // per shard, nearest first
	asked []int     // per shard, how many the read in flight asks for
	more  []bool    // per shard, whether the last read came back full
	reads []*probe  // per shard, the read in flight
}

func newSide(shards int, up bool, from Entry) *side {
	return &side{
		up:    up,
		from:  from,
		floor: math.MinInt64,
		lists: make([][]Entry, shards),
		asked: make([]int, shards),
		more:  make([]bool, shards),
		reads: make([]*probe, shards),
	}
}

// nearer reports whether x is nearer to the position than y.
func (s *side) nearer(x, y Entry) bool {
	if s.up {
		return before(y, x)
	}
	return before(x, y)
}

// take adds what a probe of shard i that asked for n entries returned.
func (s *side) take(i int, p *probe, n int) {
	got := p.down
	if s.up {
		got = p.up
	}
	full := len(got) == n && n > 0
	if !s.up {
		// Values fall going down: a shard that reached the floor has no more.
		if cut := slices.IndexFunc(got, func(e Entry) bool { return e.value < s.floor }); cut >= 0 {
			got, full = got[:cut], false
		}
	}
	s.lists[i] = append(s.lists[i], got...)
	s.more[i] = full
}

// ask queues a read of up to n more of shard i's entries, after the last
// one read (or the position).
func (s *side) ask(q *batch, b *Board, i, n int) {
	at := s.from
	if l := s.lists[i]; len(l) > 0 {
		at = l[len(l)-1]
	}
	if s.up {
		s.reads[i] = q.probe(b, i, at, n, 0)
	} else {
		s.reads[i] = q.probe(b, i, at, 0, n)
	}
	s.asked[i] = n
}

// collect takes what the reads in flight returned.
func (s *side) collect() {
	for i, p := range s.reads {
		if p != nil {
			s.take(i, p, s.asked[i])
			s.reads[i] = nil
		}
	}
}

// nearest merges the n entries nearest to the position, nearest first.
func (s *side) nearest(n int) []Entry {
	if n <= 0 {
		return nil
	}
	return shard.Merge(s.lists, s.nearer, n)
}

// askMore queues the reads that the n entries nearest to the position
// still need, after which they are exact: a shard whose read came back full
// and whose last entry made the cut may hold more of it — as many as the
// cut has places after that entry.
func (s *side) askMore(q *batch, b *Board, n int) {
	if n <= 0 {
		return
	}
	cut := s.nearest(n)
	for i, l := range s.lists {
		if !s.more[i] {
			continue
		}
		last := l[len(l)-1]
		if at := sort.Search(len(cut), func(j int) bool { return !s.nearer(cut[j], last) }); at < n-1 {
			s.ask(q, b, i, n-1-at)
		}
	}
}

// countAbove counts the entries with a value greater than v on every shard.
func (b *Board) countAbove(ctx context.Context, v int64) (int64, error) {
	return b.countRange(ctx, "("+strconv.FormatInt(v, 10), "+inf")
}

// countRange sums ZCOUNT min max over the shards.
func (b *Board) countRange(ctx context.Context, min, max string) (int64, error) {
	pipe := b.c.Pipeline()
	cmds := make([]*redis.IntCmd, len(b.shards))
	for i, key := range b.shards {
		cmds[i] = pipe.ZCount(ctx, key, min, max)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("rank: count in %s: %w", b.cfg.Name, err)
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}

// distinctPage is how many distinct values one distinct.lua call lists.
const distinctPage = 1000

// distinctAbove counts the distinct values greater than v over all shards,
// exactly: each shard lists its own, distinctPage per call, and the lists
// are merged. It costs O(D log n) on the servers and O(D) memory here, for
// D distinct better values, and D/distinctPage + 1 round trips.
func (b *Board) distinctAbove(ctx context.Context, v int64) (int64, error) {
	vals, err := b.distinctValuesAbove(ctx, v)
	return int64(len(vals)), err
}

// distinctValuesAbove is the distinct values greater than v over all
// shards, ascending, at distinctAbove's cost.
func (b *Board) distinctValuesAbove(ctx context.Context, v int64) ([]int64, error) {
	seen := map[string]struct{}{}
	from := make([]string, len(b.shards))
	for i := range from {
		from[i] = strconv.FormatInt(v, 10)
	}
	open := allShards(len(b.shards))
	for len(open) > 0 {
		q := newBatch(ctx)
		var next []int
		for _, i := range open {
			q.add(luascript.Call{Script: distinctScript, Keys: []string{b.shards[i]}, Args: []any{from[i], distinctPage}}, func(cmd *redis.Cmd) error {
				vals, err := cmd.StringSlice()
				if err != nil {
					return err
				}
				for _, s := range vals {
					seen[s] = struct{}{}
				}
				if len(vals) == distinctPage {
					from[i] = vals[len(vals)-1]
					next = append(next, i)
				}
				return nil
			})
		}
		if err := q.run(b.c); err != nil {
			return nil, fmt.Errorf("rank: dense rank in %s: %w", b.cfg.Name, err)
		}
		open = next
	}
	vals := make([]int64, 0, len(seen))
	for s := range seen {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("rank: dense rank in %s: value %q", b.cfg.Name, s)
		}
		vals = append(vals, int64(f))
	}
	slices.Sort(vals)
	return vals, nil
}

// allShards is 0, 1, …, n-1.
func allShards(n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}
