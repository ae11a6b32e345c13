package hotlist

import "strconv"

// batch is what a claim aggregated between two flushes.
type batch struct {
	from, to int64 // offsets covered; from is -1 when none
	base     int64 // Decay: the landmark number the values are scaled to
	addedMs  int64 // when the first of them was added (list clock, Unix ms)
	groups   []*group
	free     []*group
	last     *group
	likeIdx  map[string]int
	likes    []like
	entries  int
}

// group sums increments per item for one target: the decay heat, or one
// window slot.
type group struct {
	slot  int64
	idx   map[string]int32
	items []string
	vals  []float64
}

// like is a user's like of an item, kept apart until the flush script has
// checked that the user had not liked it before.
type like struct {
	bucket, slot int64
	member, item string
	val          float64
}

func newBatch() *batch { return &batch{from: -1, likeIdx: map[string]int{}} }

func (b *batch) reset() {
	for _, g := range b.groups {
		clear(g.idx)
		g.items, g.vals = g.items[:0], g.vals[:0]
	}
	b.free = append(b.free, b.groups...)
	b.groups, b.last = b.groups[:0], nil
	clear(b.likeIdx)
	b.likes = b.likes[:0]
	b.from, b.to, b.base, b.addedMs, b.entries = -1, 0, 0, 0, 0
}

func (b *batch) group(slot int64) *group {
	if b.last != nil && b.last.slot == slot {
		return b.last
	}
	for _, g := range b.groups {
		if g.slot == slot {
			b.last = g
			return g
		}
	}
	var g *group
	if n := len(b.free); n > 0 {
		g, b.free = b.free[n-1], b.free[:n-1]
	} else {
		g = &group{idx: map[string]int32{}}
	}
	g.slot = slot
	b.groups = append(b.groups, g)
	b.last = g
	return g
}

// add adds v to item in slot's group; the lookup of an item already present
// allocates nothing.
func (b *batch) add(slot int64, item []byte, v float64) {
	g := b.group(slot)
	if i, ok := g.idx[string(item)]; ok {
		g.vals[i] += v
		return
	}
	s := string(item)
	g.idx[s] = int32(len(g.items))
	g.items = append(g.items, s)
	g.vals = append(g.vals, v)
	b.entries++
}

// addLike keeps a user's first like of an item in a dedup bucket; scratch is
// reused for the lookup key and returned.
func (b *batch) addLike(scratch []byte, bucket, slot int64, item, user []byte, v float64) []byte {
	scratch = strconv.AppendInt(scratch[:0], bucket, 10)
	scratch = append(scratch, 0)
	scratch = append(scratch, item...)
	scratch = append(scratch, 0)
	scratch = append(scratch, user...)
	if _, ok := b.likeIdx[string(scratch)]; ok {
		return scratch // the user's first like in this batch counts
	}
	b.likeIdx[string(scratch)] = len(b.likes)
	// The member is unambiguous: a user id holds no NUL, so the last NUL
	// separates it from the item.
	member := string(item) + "\x00" + string(user)
	b.likes = append(b.likes, like{bucket: bucket, slot: slot, member: member, item: string(item), val: v})
	b.entries++
	return scratch
}
