package hotlist

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// heatView is a Decay claim's copy of its partition's current heat set:
// every member and its score, as the last flush left them. The claim is the
// set's only writer (the offset fence stops any other), so the copy follows
// the set from flush to flush, and the claim makes flush.lua's decisions
// itself: it leaves out the increments the script would not admit (an item
// absent from a full set whose increment is below the set's lowest score,
// most of a long tail) and sends each other item's new score, the very
// double the script would compute (the old score plus the increment), for
// the script to write as it is. The result is the same; the script's work
// per item is a ZADD instead of a ZMSCORE, an admission test, a sum and a
// ZADD. The script checks the copy is of the set it writes (staleView
// otherwise), and each reply is checked against the copy (size and lowest
// score): on any doubt the claim drops the copy, sends increments as
// before, and asks the next reply for the set's members.
type heatView struct {
	known  bool
	epoch  int64 // the landmark of the set copied
	scores map[string]float64
	floor  float64 // the lowest score, when full
}

// staleView is flush.lua's status for a call whose copy is not of the
// partition's current heat set: nothing was done.
const staleView = -3

func (v *heatView) forget() { v.known, v.scores = false, nil }

// usable reports whether a flush of b can be made from the copy: it is of
// the heat set b's increments are scaled to, and no build is under way.
func (v *heatView) usable(c *Claim, b *batch) bool {
	return v.known && !c.rescaling && b.base == v.epoch && !c.a.sendAll
}

// wanted reports whether the next flush should ask for the set's members:
// there is no copy, and no build under way (which ends in a switch of sets).
func (v *heatView) wanted(c *Claim) bool {
	return c.l.cfg.Model == Decay && !v.known && !c.rescaling && !c.a.sendAll
}

func (v *heatView) full(keep int) bool { return len(v.scores) >= keep }

// score is flush.lua's decision for item's increment val, full being
// whether the set was full before the flush: the item's new score, whether
// the set admits it (false: left out) and whether it is new to the set.
func (v *heatView) score(item string, val float64, full bool) (s float64, admitted, fresh bool) {
	if old, ok := v.scores[item]; ok {
		return old + val, true, false
	}
	return val, !full || val >= v.floor, true
}

// flushReply is flush.lua's reply.
type flushReply struct {
	status, stored, epoch int64
	building              bool
	decay                 bool // the fields below are set
	card                  int64
	floor                 string   // '' when not full
	names                 []string // members and scores, or the members trimmed
	liked                 []bool   // per like, whether it was added
}

func parseFlushReply(res []any) (flushReply, error) {
	var r flushReply
	if len(res) != 4 && len(res) != 8 {
		return r, badReply(res)
	}
	var ints [4]int64
	for i := range ints {
		n, ok := res[i].(int64)
		if !ok {
			return r, badReply(res)
		}
		ints[i] = n
	}
	r.status, r.stored, r.epoch, r.building = ints[0], ints[1], ints[2], ints[3] == 1
	if len(res) == 4 {
		return r, nil
	}
	card, ok1 := res[4].(int64)
	floor, ok2 := res[5].(string)
	names, ok3 := res[6].([]any)
	liked, ok4 := res[7].([]any)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return r, badReply(res)
	}
	r.liked = make([]bool, len(liked))
	for i, l := range liked {
		n, ok := l.(int64)
		if !ok {
			return r, badReply(res)
		}
		r.liked[i] = n == 1
	}
	r.decay, r.card, r.floor, r.names = true, card, floor, make([]string, len(names))
	for i, n := range names {
		if r.names[i], ok1 = n.(string); !ok1 {
			return r, badReply(res)
		}
	}
	return r, nil
}

// badReply is built only for a reply that does not parse: formatting every
// good one took 0.04 s of the consumer's 0.38 s of CPU in a profile of
// hotkafka's BenchmarkIngest.
func badReply(res []any) error { return fmt.Errorf("unexpected reply %v", res) }

// update follows an applied flush of b (used: made from the copy; want:
// asking for the members).
func (v *heatView) update(b *batch, r flushReply, keep int, used, want bool) {
	switch {
	case !r.decay || r.building:
		v.forget()
		return
	case want:
		if v.load(r.names) != nil {
			v.forget()
			return
		}
	case !used || r.epoch != v.epoch || len(r.liked) != len(b.likes):
		v.forget() // increments the copy did not decide
		return
	default:
		full := v.full(keep)
		for _, g := range b.groups {
			for i, item := range g.items {
				if s, ok, _ := v.score(item, g.vals[i], full); ok {
					v.scores[item] = s
				}
			}
		}
		for j, lk := range b.likes { // ZINCRBY, after the groups
			if r.liked[j] {
				v.scores[lk.item] += lk.val
			}
		}
		for _, m := range r.names {
			delete(v.scores, m)
		}
	}
	v.known, v.epoch = true, r.epoch
	if !v.check(r, keep) {
		v.forget()
	}
}

// load replaces the copy with flush.lua's list of members and scores.
func (v *heatView) load(flat []string) error {
	if len(flat)%2 != 0 {
		return errors.New("odd list")
	}
	v.scores = make(map[string]float64, len(flat)/2)
	for j := 0; j < len(flat); j += 2 {
		s, err := strconv.ParseFloat(flat[j+1], 64)
		if err != nil {
			return err
		}
		v.scores[flat[j]] = s
	}
	return nil
}

// loadSorted makes the copy from the members and scores of the heat set of
// landmark epoch, lowest first (ZRANGE), setting the floor when full.
func (v *heatView) loadSorted(members []redis.Z, epoch int64, keep int) {
	v.known, v.epoch, v.floor = true, epoch, 0
	v.scores = make(map[string]float64, len(members))
	for _, z := range members {
		m, _ := z.Member.(string)
		v.scores[m] = z.Score
	}
	if len(members) >= keep {
		v.floor = members[0].Score
	}
}

// check compares the copy with the set's size and lowest score as the
// script reports them, and sets the floor.
func (v *heatView) check(r flushReply, keep int) bool {
	if int64(len(v.scores)) != r.card || v.full(keep) != (r.floor != "") {
		return false
	}
	if !v.full(keep) {
		return true
	}
	floor, err := strconv.ParseFloat(r.floor, 64)
	if err != nil {
		return false
	}
	lowest := math.Inf(1)
	for _, s := range v.scores {
		lowest = min(lowest, s)
	}
	v.floor = floor
	return lowest == floor
}
