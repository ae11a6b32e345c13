package hotlist

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/obs"
	"github.com/casebook-dev/casebook/outbox"
)

var (
	//go:embed flush.lua
	flushLua    string
	flushScript = redis.NewScript(flushLua)
)

// AggregatorConfig configures an Aggregator.
type AggregatorConfig struct {
	// FlushEvery is how often a claim is due to flush. Default 1 s.
	FlushEvery time.Duration
	// CaughtUpFlush is how soon after its last flush a claim whose consumer
	// has read to the end of its partition is due (DueCaughtUp): a drained
	// backlog reaches the list at once instead of up to FlushEvery later,
	// while a partition fed a trickle still flushes at most once per
	// CaughtUpFlush. A consumer behind its partition waits for FlushEvery or
	// MaxPending, so a backlog is flushed in large calls. Default
	// FlushEvery/10; at most FlushEvery, which turns it off.
	CaughtUpFlush time.Duration
	// MaxPending is how many distinct item entries (an item per slot, or a
	// user's like) a claim holds before it is due to flush early: it bounds
	// the aggregator's memory per partition. Default the list's Keep.
	MaxPending int
}

// Aggregator pre-aggregates the events of the partitions it claims in memory
// and flushes each partition into Redis with one atomic call — a script, or
// for a large Decay batch a MULTI under WATCH — that also stores the
// partition's last applied Kafka offset. It is safe for
// concurrent use; each Claim belongs to one goroutine.
type Aggregator struct {
	l     *List
	cfg   AggregatorConfig
	stats struct {
		events, rejected, malformed, expired, duplicates atomic.Int64
		flushes, replays, resyncs, flushed, unsent       atomic.Int64
		natives, fallbacks                               atomic.Int64 // flushes by nativeFlush; tried and not
	}
	open   openClaims
	gauges *obs.Registration
	// sendAll: flushes leave nothing out (heatView), for the tests that
	// compare both ways.
	sendAll bool
}

// Stats counts what an Aggregator did.
type Stats struct {
	Events     int64 // events aggregated
	Rejected   int64 // events rejected: unknown kind, future time, wrong partition, like without user
	Malformed  int64 // messages rejected whole (ErrMalformed)
	Expired    int64 // Window: events whose slot had left the ring when they arrived
	Duplicates int64 // messages at or below a claim's applied offset, skipped
	Flushes    int64 // flushes applied
	Replays    int64 // flushes that found their offsets applied already (a retry after a lost reply)
	Resyncs    int64 // claims closed with ErrResync
	Flushed    int64 // item entries in applied flushes
	Unsent     int64 // Decay: of those, left out of the script call because it would not admit them (below a full set's lowest score)
	Fallbacks  int64 // Decay: flushes meant for a WATCH transaction that the script made instead (Redis was not as the claim's copy said, the transaction was aborted, or it failed)
}

// NewAggregator returns an aggregator feeding l.
func NewAggregator(l *List, cfg AggregatorConfig) (*Aggregator, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil list", ErrConfig)
	}
	cfg.FlushEvery = cmp.Or(cfg.FlushEvery, time.Second)
	cfg.MaxPending = cmp.Or(cfg.MaxPending, l.cfg.Keep)
	cfg.CaughtUpFlush = cmp.Or(cfg.CaughtUpFlush, cfg.FlushEvery/10, cfg.FlushEvery)
	switch {
	case cfg.FlushEvery < 0 || cfg.MaxPending < 1 || cfg.MaxPending > 1_000_000:
		return nil, fmt.Errorf("%w: flush every %v, max pending %d (1..1000000)", ErrConfig, cfg.FlushEvery, cfg.MaxPending)
	case cfg.CaughtUpFlush <= 0 || cfg.CaughtUpFlush > cfg.FlushEvery:
		return nil, fmt.Errorf("%w: caught-up flush %v (0 < it ≤ flush every %v)", ErrConfig, cfg.CaughtUpFlush, cfg.FlushEvery)
	}
	a := &Aggregator{l: l, cfg: cfg}
	a.gauges = a.registerAggregator()
	return a, nil
}

// Close unregisters the aggregator's observable metrics; its claims work
// on, unobserved (release them first: the aggregator owns no goroutine or
// connection). Safe to call twice.
func (a *Aggregator) Close() error { return a.gauges.Close() }

// FlushEvery returns the flush interval.
func (a *Aggregator) FlushEvery() time.Duration { return a.cfg.FlushEvery }

// CaughtUpFlush returns the flush interval of a claim whose consumer has
// caught up with its partition.
func (a *Aggregator) CaughtUpFlush() time.Duration { return a.cfg.CaughtUpFlush }

// Stats returns the counts so far.
func (a *Aggregator) Stats() Stats {
	s := &a.stats
	return Stats{
		Events: s.events.Load(), Rejected: s.rejected.Load(), Malformed: s.malformed.Load(),
		Expired: s.expired.Load(), Duplicates: s.duplicates.Load(), Flushes: s.flushes.Load(),
		Replays: s.replays.Load(), Resyncs: s.resyncs.Load(), Flushed: s.flushed.Load(), Unsent: s.unsent.Load(),
		Fallbacks: s.fallbacks.Load(),
	}
}

// Claim is an aggregator's hold on one partition: feed it the partition's
// messages in offset order with Add, and Flush when Due. It is not safe for
// concurrent use: one goroutine per partition, as a consumer group gives.
type Claim struct {
	a         *Aggregator
	l         *List
	p         int
	applied   int64 // last offset stored in Redis as far as this claim knows
	epoch     int64 // the landmark (Decay) or slot (Window) of the partition's heat set (-1: none)
	rescaling bool  // a heat set is being built (a landmark or a slot coming)
	closed    bool
	last      time.Time // last flush
	pend      *batch    // filling
	sealed    *batch    // being flushed: kept as it was until a flush succeeds
	spare     *batch
	scratch   []rawEvent
	likeKey   []byte
	growths   *[growthCache]growthAt // Decay: 2^((ms−landmark)/HalfLife) by ms
	view      heatView               // Decay: the partition's heat set, as of the last flush
	refusals  int                    // Decay: transactions Redis refused in a row (nativeFlush)
	// unflushedSince is when (Unix ms, by the list's clock) the oldest
	// event the claim holds unflushed was added; 0 when none. Read by the
	// lag gauge from another goroutine.
	unflushedSince atomic.Int64
}

// growthCache is how many milliseconds a claim remembers the decay factor
// of: events arrive roughly in time order, so most of them hit.
const growthCache = 1024

type growthAt struct {
	ms, base int64 // base+1, so that the zero value is empty
	f        float64
}

// growth returns 2^((ms − L)/HalfLife) for the landmark L of base.
func (c *Claim) growth(ms, base int64) float64 {
	if c.growths == nil {
		c.growths = new([growthCache]growthAt)
	}
	g := &c.growths[ms&(growthCache-1)]
	if g.ms != ms || g.base != base+1 {
		*g = growthAt{ms: ms, base: base + 1, f: math.Exp2(float64(ms-base*c.l.epochMs) / c.l.halfMs)}
	}
	return g.f
}

// Claim starts aggregating partition p: it reads the offset last applied to
// Redis, so that Add skips what is already counted. Consume the partition
// from Resume. A second Claim of the same partition (another process after a
// rebalance) is safe: the offset fence lets only one apply each offset.
func (a *Aggregator) Claim(ctx context.Context, partition int32) (*Claim, error) {
	ctx, call := a.l.obs.claim.Start(ctx)
	c, err := a.newClaim(ctx, partition)
	if err != nil {
		return nil, call.End(err)
	}
	a.open.add(c)
	return c, call.End(nil)
}

func (a *Aggregator) newClaim(ctx context.Context, partition int32) (*Claim, error) {
	if partition < 0 || int(partition) >= len(a.l.parts) {
		return nil, fmt.Errorf("%w: partition %d outside 0..%d", ErrInvalid, partition, len(a.l.parts)-1)
	}
	pk := a.l.parts[partition]
	vals, err := a.l.c.HMGet(ctx, pk.meta, "offset", "epoch", "mig").Result()
	if err != nil {
		return nil, fmt.Errorf("hotlist: claim partition %d: %w", partition, err)
	}
	c := &Claim{a: a, l: a.l, p: int(partition), applied: -1, epoch: -1, last: a.l.cfg.Now()}
	if c.applied, err = metaInt(vals[0], -1); err == nil {
		c.epoch, err = metaInt(vals[1], -1)
	}
	if err != nil {
		return nil, fmt.Errorf("hotlist: claim partition %d: %s: %w", partition, pk.meta, err)
	}
	c.rescaling = vals[2] != nil
	c.pend, c.spare = newBatch(), newBatch()
	return c, nil
}

func metaInt(v any, none int64) (int64, error) {
	if v == nil {
		return none, nil
	}
	s, _ := v.(string)
	return strconv.ParseInt(s, 10, 64)
}

// Partition returns the claimed partition.
func (c *Claim) Partition() int32 { return int32(c.p) }

// Resume is the first offset the claim needs: one past the last offset
// applied to Redis. Kafka's committed offset may lag behind it (offsets
// below are skipped) but must not be ahead of it: a consumer whose group
// offset is past Resume has to rewind there, or the events in between are
// lost (after a Redis failover, say).
func (c *Claim) Resume() int64 { return c.applied + 1 }

// Applied returns the last offset known applied to Redis (-1: none).
func (c *Claim) Applied() int64 { return c.applied }

// Add aggregates the batch at offset in memory. Offsets at or below one
// already added or applied are skipped (a redelivery). A batch that does not
// decode returns an error wrapping ErrMalformed (and outbox.ErrPoison) and
// applies nothing; events that decode but cannot count — an unknown kind, a
// time beyond the clock plus MaxSkew, an item of another partition, a like
// without a user under DedupLikes — are left out and reported with
// ErrRejected while the others are applied. Either way the offset is
// consumed, so a bad message never blocks the partition: Add never asks for
// a retry.
func (c *Claim) Add(offset int64, value []byte) error {
	if c.closed {
		return ErrClosed
	}
	if offset <= c.applied || c.pend.from >= 0 && offset <= c.pend.to || c.sealed != nil && offset <= c.sealed.to {
		c.a.stats.duplicates.Add(1)
		return nil
	}
	nowMs := c.l.cfg.Now().UnixMilli()
	b := c.pend
	if b.from < 0 {
		b.from, b.base, b.addedMs = offset, c.l.epochOf(nowMs), nowMs
		if c.unflushedSince.Load() == 0 {
			c.unflushedSince.Store(nowMs)
		}
	}
	b.to = offset
	raw, err := decodeBatch(value, c.scratch)
	if err != nil {
		c.a.stats.malformed.Add(1)
		return outbox.Poison(fmt.Errorf("%w (partition %d, offset %d)", err, c.p, offset))
	}
	c.scratch = raw
	var first error
	rejected, accepted := 0, 0
	for i := range raw {
		switch err := c.add(b, &raw[i], nowMs); {
		case err == nil:
			accepted++
		case errors.Is(err, errExpired):
		default:
			if rejected == 0 {
				first = fmt.Errorf("event %d: %w", i, err)
			}
			rejected++
		}
	}
	c.a.stats.events.Add(int64(accepted))
	if rejected > 0 {
		c.a.stats.rejected.Add(int64(rejected))
		return fmt.Errorf("%w: %d of %d events (partition %d, offset %d), first %w", ErrRejected, rejected, len(raw), c.p, offset, first)
	}
	return nil
}

// errExpired: a window event whose slot has left the ring; not an error of
// the input, only not counted.
var errExpired = errors.New("hotlist: slot out of the ring")

func (c *Claim) add(b *batch, e *rawEvent, nowMs int64) error {
	l := c.l
	switch {
	case !l.weighted[e.kind]:
		return fmt.Errorf("%w %d", ErrUnknownKind, e.kind)
	case e.ms > nowMs+l.skewMs:
		return fmt.Errorf("%w: %v is %v ahead of the clock", ErrFuture, time.UnixMilli(e.ms).UTC(), time.Duration(e.ms-nowMs)*time.Millisecond)
	case PartitionOf(e.item, len(l.parts)) != int32(c.p):
		return fmt.Errorf("%w: %q belongs to partition %d, not %d", ErrWrongPartition, e.item, PartitionOf(e.item, len(l.parts)), c.p)
	}
	dedup := l.cfg.DedupLikes && e.kind == Like
	if dedup && len(e.user) == 0 {
		return ErrNoUser
	}
	w := l.weights[e.kind]
	var slot int64
	switch l.cfg.Model {
	case Decay:
		w *= c.growth(e.ms, b.base)
	case Window:
		slot = l.slotOf(e.ms)
		if slot <= l.slotOf(nowMs)-int64(l.cfg.Slots) {
			c.a.stats.expired.Add(1)
			return errExpired
		}
	}
	if dedup {
		c.likeKey = b.addLike(c.likeKey, floorDiv(e.ms, l.dedupMs), slot, e.item, e.user, w)
	} else {
		b.add(slot, e.item, w)
	}
	return nil
}

// Due reports whether the claim should flush now: its interval has passed
// with something to flush, it holds MaxPending entries, or an earlier flush
// failed and waits for a retry.
func (c *Claim) Due() bool { return c.due(c.a.cfg.FlushEvery) }

// DueCaughtUp is Due for a consumer that has read everything its partition
// holds (its last message's offset is one below the high-water mark): the
// claim is due once CaughtUpFlush has passed since its last flush.
func (c *Claim) DueCaughtUp() bool { return c.due(c.a.cfg.CaughtUpFlush) }

func (c *Claim) due(every time.Duration) bool {
	if c.closed {
		return false
	}
	if c.sealed != nil || c.pend.entries >= c.a.cfg.MaxPending {
		return true
	}
	now := c.l.cfg.Now()
	return now.Sub(c.last) >= every && c.hasWork(now)
}

// hasWork: offsets to store, or a heat set to build or switch to — a
// landmark passed (Decay), or a slot's last minute or a new slot begun
// (Window).
func (c *Claim) hasWork(now time.Time) bool {
	if c.pend.from >= 0 || c.rescaling {
		return true
	}
	ms := now.UnixMilli()
	switch {
	case c.epoch < 0 && c.applied < 0:
		return false // nothing here yet
	case c.l.cfg.Model == Decay:
		return c.l.epochOf(ms) > c.epoch
	}
	return c.l.slotOf(ms) > c.epoch || ms >= (c.epoch+1)*c.l.slotMs-buildLead(c.l.slotMs)
}

// buildLead is how long before a slot starts its window's heat set is
// built (flush.lua decides the same): the slot's last minute, or half.
func buildLead(slotMs int64) int64 { return min(slotMs/2, 60_000) }

// Flush applies what the claim holds to Redis in one script call (or one
// MULTI under WATCH: doc.go, "Bounded memory"), with the last offset it
// covers; while the partition builds its next heat set (a new
// landmark's, or the coming slot's window totals) the same call reads the
// next chunk. If the call fails the claim keeps the batch and sends the very
// same one on the next Flush (Add may go on meanwhile), so a call that did
// apply but whose reply was lost is found applied, not applied twice.
// ErrResync closes the claim. Under Decay the claim keeps a copy of its
// partition's heat set (its members and scores, about Keep of them) and
// sends only what the script would write (doc.go, "Bounded memory").
func (c *Claim) Flush(ctx context.Context) error {
	ctx, call := c.l.obs.flush.Start(ctx)
	return call.End(c.flush(ctx))
}

func (c *Claim) flush(ctx context.Context) error {
	if c.closed {
		return ErrClosed
	}
	now := c.l.cfg.Now()
	if c.sealed == nil {
		if !c.hasWork(now) {
			c.last = now
			return nil
		}
		c.sealed, c.pend, c.spare = c.pend, c.spare, nil
		if c.sealed.from < 0 {
			c.sealed.base = c.l.epochOf(now.UnixMilli())
		}
	}
	b := c.sealed
	var reply flushReply
	var used, want bool
	var unsent int
	native := c.nativeUsable(b)
	for {
		if native {
			native = false
			r, left, err := c.nativeFlush(ctx, b)
			if err == nil {
				reply, unsent, used, want = r, left, true, false
				c.a.stats.natives.Add(1)
				c.refusals = 0
				break
			}
			// Not applied (errNativeStale) or not known to be: the script,
			// sent the increments, decides by the offset fence.
			c.a.stats.fallbacks.Add(1)
			if refused(err) {
				c.refusals++
			} else {
				c.refusals = 0
			}
			c.view.forget()
			if ctx.Err() != nil {
				return fmt.Errorf("hotlist: flush partition %d: %w", c.p, err)
			}
		}
		used, want = c.view.usable(c, b), c.view.wanted(c)
		keys, args, left := c.flushCall(b, now, used, want)
		res, err := flushScript.Run(ctx, c.l.c, keys, args...).Slice()
		if err == nil {
			reply, err = parseFlushReply(res)
		}
		if err != nil {
			c.view.forget() // the call may have applied
			return fmt.Errorf("hotlist: flush partition %d: %w", c.p, err)
		}
		if reply.status != staleView {
			unsent = left
			break
		}
		c.view.forget() // nothing done: send everything
	}
	c.last = now
	status, stored := reply.status, reply.stored
	if status < 0 {
		c.close()
		c.a.stats.resyncs.Add(1)
		why := "another consumer applied offsets past it"
		if status == -2 {
			why = "Redis lost writes"
		}
		return fmt.Errorf("%w: partition %d stores offset %d, this claim started from %d: %s", ErrResync, c.p, stored, c.applied, why)
	}
	if b.from >= 0 {
		if status == 0 {
			c.a.stats.replays.Add(1)
		} else {
			c.a.stats.flushes.Add(1)
			c.a.stats.flushed.Add(int64(b.entries))
			c.a.stats.unsent.Add(int64(unsent))
		}
		c.applied = stored
	}
	c.epoch, c.rescaling = reply.epoch, reply.building
	if status == 1 {
		c.view.update(b, reply, c.l.cfg.Keep, used, want)
	} else {
		c.view.forget() // a replay: the set holds what the lost reply would have told
	}
	b.reset()
	c.spare, c.sealed = b, nil
	since := int64(0)
	if c.pend.from >= 0 { // added while this flush was on its way
		since = c.pend.addedMs
	}
	c.unflushedSince.Store(since)
	return nil
}

// Release flushes what the claim holds and closes it. It is safe to call
// twice; after an error the claim stays open, so Release can be retried.
func (c *Claim) Release(ctx context.Context) error {
	for !c.closed && (c.sealed != nil || c.pend.from >= 0) {
		if err := c.Flush(ctx); err != nil {
			return err
		}
	}
	c.close()
	return nil
}

// Close drops what the claim holds unflushed and closes it: for a consumer
// that stops without flushing (its session ended, its partition revoked),
// whose successor re-reads from Resume. Release is the way to stop that
// keeps the work. Safe to call twice, and after Release.
func (c *Claim) Close() error {
	c.close()
	return nil
}

func (c *Claim) close() {
	if !c.closed {
		c.a.open.remove(c)
		c.unflushedSince.Store(0)
	}
	c.closed = true
	c.pend, c.sealed, c.spare, c.scratch = nil, nil, nil, nil
	c.view.forget()
}

// flushCall builds flush.lua's keys and arguments for b, from the claim's
// copy of the heat set (used: new scores, the increments the script would
// not admit left out) or not (increments), and returns how many it left
// out; want asks for the heat set's members.
func (c *Claim) flushCall(b *batch, now time.Time, used, want bool) ([]string, []any, int) {
	l, pk := c.l, c.l.parts[c.p]
	keys := []string{pk.meta, pk.heat[0], pk.heat[1]}
	var expiries []any
	nowMs := now.UnixMilli()
	cnow, slots := int64(-1), 0
	slotIndex := map[int64]int{}
	if l.cfg.Model == Window {
		// The script finds the slots of the current and the next window at
		// fixed places: now−S+1 .. now+1, in order.
		cnow, slots = l.slotOf(nowMs), l.cfg.Slots
		for s := cnow - int64(slots) + 1; s <= cnow+1; s++ {
			keys = append(keys, l.slotKey(c.p, s))
			slotIndex[s] = len(keys)
		}
	}
	written := map[int64]bool{}
	// keyOf returns the KEYS index of a window slot (0: the decay heat).
	keyOf := func(slot int64) int {
		if l.cfg.Model == Decay {
			return 0
		}
		i, ok := slotIndex[slot]
		if !ok {
			keys = append(keys, l.slotKey(c.p, slot))
			i = len(keys)
			slotIndex[slot] = i
		}
		if !written[slot] {
			written[slot] = true
			// Kept one slot past leaving the ring, for readers whose clock lags.
			expiries = append(expiries, i, (slot+int64(l.cfg.Slots)+1)*l.slotMs)
		}
		return i
	}
	target, step := int64(-1), 0
	if l.cfg.Model == Decay {
		target, step = b.base, l.cfg.RescaleEvery
	}
	from, to := b.from, b.to
	if from < 0 {
		to = -1
	}
	args := make([]any, 0, 16+slots+4*len(b.groups)+2*b.entries+6*len(b.likes))
	view, wanted := int64(-1), 0
	if used {
		view = c.view.epoch
	}
	if want {
		wanted = 1
	}
	args = append(args, c.applied, from, to, l.cfg.Keep, l.cfg.RescaleChunk, target, step, cnow, slots, nowMs, l.slotMs, view, wanted)
	for i := range slots {
		args = append(args, formatFloat(l.cfg.SlotWeights[i]))
	}
	args = append(args, len(b.groups))
	left := 0
	for _, g := range b.groups {
		args = append(args, keyOf(g.slot), g.slot, len(g.items))
		count, sent, full := len(args)-1, 0, c.view.full(l.cfg.Keep)
		for i, item := range g.items {
			if !used {
				args = append(args, item, formatFloat(g.vals[i]))
			} else if s, ok, _ := c.view.score(item, g.vals[i], full); ok {
				args = append(args, formatFloat(s), item) // ZADD's order
			} else {
				continue
			}
			sent++
		}
		args[count] = sent
		left += len(g.items) - sent
	}
	args = append(args, len(b.likes))
	likeSets := map[int64]int{}
	for _, lk := range b.likes {
		set, ok := likeSets[lk.bucket]
		if !ok {
			keys = append(keys, l.likesKey(c.p, lk.bucket))
			set = len(keys)
			likeSets[lk.bucket] = set
			// Kept for two windows: a like arriving late still finds its set.
			expiries = append(expiries, set, (lk.bucket+2)*l.dedupMs)
		}
		args = append(args, set, keyOf(lk.slot), lk.slot, lk.member, lk.item, formatFloat(lk.val))
	}
	args = append(args, len(expiries)/2)
	args = append(args, expiries...)
	return keys, args, left
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
