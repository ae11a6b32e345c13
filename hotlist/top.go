package hotlist

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/luascript"
	"github.com/casebook-dev/casebook/shard"
)

var (
	//go:embed top_decay.lua
	topDecayLua    string
	topDecayScript = redis.NewScript(topDecayLua)
	//go:embed top_window.lua
	topWindowLua    string
	topWindowScript = redis.NewScript(topWindowLua)
)

// Entry is an item's place on the list.
type Entry struct {
	Item string `json:"item"`
	// Heat is, under Decay, Σ weight·2^(−age/HalfLife) over the item's
	// events at the time of reading (Top) or publishing (snapshots); under
	// Window, Σ weight × slot weight over the events in the live slots.
	Heat float64 `json:"heat"`
	Rank int     `json:"rank"` // 1-based
	// Change is, in a snapshot, the rank the item had in the previous
	// snapshot minus its rank now: positive when it rose. 0 when New.
	Change int `json:"change,omitempty"`
	// New marks, in a snapshot, an item the previous snapshot did not have.
	New bool `json:"new,omitempty"`
	// Pinned marks an item an operator placed at its rank (Pin).
	Pinned bool `json:"pinned,omitempty"`
}

// before reports whether a ranks above b: hotter, then, as Redis orders
// equal scores in reverse, greater name.
func before(a, b Entry) bool {
	return a.Heat > b.Heat || a.Heat == b.Heat && a.Item > b.Item
}

func order(a, b Entry) int {
	switch {
	case before(a, b):
		return -1
	case before(b, a):
		return 1
	}
	return 0
}

// partTop is one partition's best items as read: Decay heats are relative to
// the partition's landmark epoch.
type partTop struct {
	epoch   int64 // Decay; -1 for an empty partition
	entries []Entry
}

// Top returns the n hottest items now (n ≤ Keep, and ≤ 10,000), exact and
// computed live: every partition is asked for a few more than its fair share
// (2n/Partitions + 4) in one pipelined round trip of one script call each
// and the lists are merged; only partitions whose last item still made the
// cut are asked again. Operators' pins and blocks do not apply here (see
// TopCached).
func (l *List) Top(ctx context.Context, n int) ([]Entry, error) {
	ctx, call := l.obs.top.Start(ctx)
	top, err := l.top(ctx, n)
	return top, call.End(err)
}

func (l *List) top(ctx context.Context, n int) ([]Entry, error) {
	if n < 0 || n > min(l.cfg.Keep, 10_000) {
		return nil, fmt.Errorf("%w: top %d is outside 0..%d", ErrInvalid, n, min(l.cfg.Keep, 10_000))
	}
	if n == 0 {
		return nil, nil
	}
	now := l.cfg.Now()
	per := n
	if len(l.parts) > 1 {
		per = min(n, 2*n/len(l.parts)+4)
	}
	tops := make([]partTop, len(l.parts))
	all := make([]int, len(l.parts))
	for i := range all {
		all[i] = i
	}
	if err := l.fetchTops(ctx, now, tops, all, per); err != nil {
		return nil, err
	}
	merged := l.merge(tops, n)
	if per < n {
		var more []int
		to := newest(tops)
		for i, t := range tops {
			if len(t.entries) == per && (len(merged) < n || !before(merged[n-1], l.comparable(t, per-1, to))) {
				more = append(more, i)
			}
		}
		if len(more) > 0 {
			if err := l.fetchTops(ctx, now, tops, more, n); err != nil {
				return nil, err
			}
			merged = l.merge(tops, n)
		}
	}
	return l.finish(merged, tops, now), nil
}

// fetchTops reads the best upTo items of the given partitions, in one
// pipeline; under Window, partitions without a heat set for the current slot
// (a build not done yet) are asked again, with their slots, in a second.
func (l *List) fetchTops(ctx context.Context, now time.Time, tops []partTop, parts []int, upTo int) error {
	withSlots := false
	for len(parts) > 0 {
		calls := make([]luascript.Call, len(parts))
		for j, p := range parts {
			calls[j] = l.topCall(p, now, upTo, withSlots)
		}
		cmds, err := luascript.RunAll(ctx, l.c, calls)
		if err != nil {
			return fmt.Errorf("hotlist: top of %s: %w", l.cfg.Name, err)
		}
		var again []int
		for j, p := range parts {
			if reply, _ := cmds[j].Val().([]any); len(reply) == 1 && l.cfg.Model == Window {
				again = append(again, p)
				continue
			}
			t, err := l.parseTop(cmds[j].Val(), upTo)
			if err != nil {
				return fmt.Errorf("hotlist: top of %s partition %d: %w", l.cfg.Name, p, err)
			}
			tops[p] = t
		}
		if withSlots && len(again) > 0 {
			return fmt.Errorf("hotlist: top of %s: unexpected reply for partitions %v", l.cfg.Name, again)
		}
		parts, withSlots = again, true
	}
	return nil
}

func (l *List) topCall(p int, now time.Time, upTo int, withSlots bool) luascript.Call {
	pk := l.parts[p]
	if l.cfg.Model == Decay {
		return luascript.Call{Script: topDecayScript, Keys: []string{pk.meta, pk.heat[0], pk.heat[1]}, Args: []any{upTo}}
	}
	cur := l.slotOf(now.UnixMilli())
	keys := []string{pk.meta, pk.heat[0], pk.heat[1]}
	args := []any{upTo, cur}
	if withSlots {
		for i := range l.cfg.Slots {
			keys = append(keys, l.slotKey(p, cur-int64(i)))
			args = append(args, formatFloat(l.cfg.SlotWeights[i]))
		}
	}
	return luascript.Call{Script: topWindowScript, Keys: keys, Args: args}
}

func (l *List) parseTop(reply any, upTo int) (partTop, error) {
	flat, ok := reply.([]any)
	t := partTop{epoch: -1}
	if !ok {
		return t, fmt.Errorf("unexpected reply %v", reply)
	}
	if l.cfg.Model == Decay {
		if len(flat) == 0 {
			return t, fmt.Errorf("unexpected reply %v", reply)
		}
		t.epoch, _ = flat[0].(int64)
		flat = flat[1:]
	}
	if len(flat)%2 != 0 {
		return t, fmt.Errorf("unexpected reply %v", reply)
	}
	t.entries = make([]Entry, 0, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		item, _ := flat[i].(string)
		s, _ := flat[i+1].(string)
		h, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return t, fmt.Errorf("heat %q of %q: %w", s, item, err)
		}
		t.entries = append(t.entries, Entry{Item: item, Heat: h})
	}
	if l.cfg.Model == Window { // ties at the cut come unordered
		slices.SortFunc(t.entries, order)
		t.entries = t.entries[:min(upTo, len(t.entries))]
	}
	return t, nil
}

// newest is the latest landmark among the partitions (Decay).
func newest(tops []partTop) int64 {
	e := int64(-1)
	for _, t := range tops {
		e = max(e, t.epoch)
	}
	return e
}

// comparable returns partition p's i-th entry with its heat on the scale of
// landmark `to`, so that partitions on different landmarks (one is
// rescaling) compare exactly: the factor is a power of two.
func (l *List) comparable(t partTop, i int, to int64) Entry {
	e := t.entries[i]
	if l.cfg.Model == Decay && t.epoch != to {
		e.Heat = math.Ldexp(e.Heat, int(t.epoch-to)*l.cfg.RescaleEvery)
	}
	return e
}

func (l *List) merge(tops []partTop, n int) []Entry {
	to := newest(tops)
	lists := make([][]Entry, len(tops))
	for p, t := range tops {
		lists[p] = t.entries
		if l.cfg.Model == Decay && t.epoch != to && len(t.entries) > 0 {
			lists[p] = make([]Entry, len(t.entries))
			for i := range t.entries {
				lists[p][i] = l.comparable(t, i, to)
			}
		}
	}
	return shard.Merge(lists, before, n)
}

// finish ranks the merged entries and, under Decay, turns heats relative to
// the newest landmark into heats now.
func (l *List) finish(merged []Entry, tops []partTop, now time.Time) []Entry {
	scale := 1.0
	if l.cfg.Model == Decay {
		landmark := newest(tops) * l.epochMs
		scale = math.Exp2(float64(landmark-now.UnixMilli()) / l.halfMs)
	}
	for i := range merged {
		merged[i].Heat *= scale
		merged[i].Rank = i + 1
	}
	return merged
}
