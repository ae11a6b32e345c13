package hotlist

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed publish.lua
	publishLua    string
	publishScript = redis.NewScript(publishLua)
)

// ErrPublishConflict is returned by Publish when another publisher stored a
// snapshot between this one's read and write; nothing was stored.
var ErrPublishConflict = errors.New("hotlist: another publisher stored a snapshot first")

// Snapshot is a published top list.
type Snapshot struct {
	At      time.Time `json:"at"` // when it was published
	Entries []Entry   `json:"entries"`
}

// Publish stores the top SnapshotSize items, blocked items left out, with
// each item's rank change since the previous snapshot. Several publishers may
// run: each snapshot is stored only if the one it was compared with is still
// the latest (ErrPublishConflict otherwise), so rank changes always refer to
// the snapshot just before.
func (l *List) Publish(ctx context.Context) (Snapshot, error) {
	ctx, call := l.obs.publish.Start(ctx)
	snap, err := l.publishTop(ctx)
	return snap, call.End(err)
}

func (l *List) publishTop(ctx context.Context) (Snapshot, error) {
	pipe := l.c.Pipeline()
	stored := pipe.HMGet(ctx, l.snap, "at", "data")
	blocks := pipe.SMembers(ctx, l.block)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Snapshot{}, fmt.Errorf("hotlist: publish %s: %w", l.cfg.Name, err)
	}
	prevAt, prev := "", map[string]int{}
	if v := stored.Val(); len(v) == 2 && v[0] != nil {
		prevAt = fmt.Sprint(v[0])
		// A snapshot this version cannot read (a newer deploy's) is
		// replaced; its items count as new.
		if old, err := decodeSnapshot([]byte(fmt.Sprint(v[1]))); err == nil {
			for _, e := range old.Entries {
				prev[e.Item] = e.Rank
			}
		}
	}
	blocked := blocks.Val()
	top, err := l.top(ctx, min(l.cfg.Keep, 10_000, l.cfg.SnapshotSize+len(blocked)))
	if err != nil {
		return Snapshot{}, err
	}
	top = slices.DeleteFunc(top, func(e Entry) bool { return slices.Contains(blocked, e.Item) })
	top = top[:min(len(top), l.cfg.SnapshotSize)]
	now := l.cfg.Now()
	snap := Snapshot{At: now.Truncate(time.Millisecond), Entries: top}
	for i := range top {
		top[i].Rank = i + 1
		if was, ok := prev[top[i].Item]; ok {
			top[i].Change = was - top[i].Rank
		} else {
			top[i].New = true
		}
	}
	at := strconv.FormatInt(snap.At.UnixMilli(), 10)
	ok, err := publishScript.Run(ctx, l.c, []string{l.snap}, prevAt, at, encodeSnapshot(snap)).Int()
	if err != nil {
		return Snapshot{}, fmt.Errorf("hotlist: publish %s: %w", l.cfg.Name, err)
	}
	if ok != 1 {
		return Snapshot{}, ErrPublishConflict
	}
	return snap, nil
}

// RunPublisher publishes every Refresh until ctx ends, skipping a turn when
// another publisher's snapshot is younger than Refresh/2; errors go to
// onError (nil: ignored) and the loop carries on. Run one or a few per list.
func (l *List) RunPublisher(ctx context.Context, onError func(error)) {
	t := time.NewTicker(l.cfg.Refresh)
	defer t.Stop()
	for {
		if err := l.publishIfDue(ctx); err != nil && onError != nil && ctx.Err() == nil {
			onError(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (l *List) publishIfDue(ctx context.Context) error {
	at, err := l.c.HGet(ctx, l.snap, "at").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("hotlist: publish %s: %w", l.cfg.Name, err)
	}
	if err == nil && l.cfg.Now().Sub(time.UnixMilli(at)) < l.cfg.Refresh/2 {
		return nil
	}
	_, err = l.Publish(ctx)
	if errors.Is(err, ErrPublishConflict) {
		return nil
	}
	return err
}

// Snapshot reads the latest snapshot from Redis with the operators'
// controls applied: blocked items removed, pinned items placed at their
// positions, ranks renumbered. ErrNoSnapshot before the first Publish.
func (l *List) Snapshot(ctx context.Context) (Snapshot, error) {
	ctx, call := l.obs.snapshot.Start(ctx)
	snap, err := l.snapshot(ctx)
	return snap, call.End(err)
}

func (l *List) snapshot(ctx context.Context) (Snapshot, error) {
	pipe := l.c.Pipeline()
	stored := pipe.HGet(ctx, l.snap, "data")
	pins := pipe.HGetAll(ctx, l.pins)
	blocks := pipe.SMembers(ctx, l.block)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Snapshot{}, fmt.Errorf("hotlist: snapshot of %s: %w", l.cfg.Name, err)
	}
	data, err := stored.Bytes()
	if errors.Is(err, redis.Nil) {
		return Snapshot{}, ErrNoSnapshot
	}
	snap, err := decodeSnapshot(data)
	if err != nil {
		return Snapshot{}, fmt.Errorf("hotlist: snapshot of %s: %w", l.cfg.Name, err)
	}
	snap.Entries = l.applyControls(snap.Entries, pins.Val(), blocks.Val())
	return snap, nil
}

// view is what TopCached serves.
type view struct {
	snap    Snapshot
	err     error // ErrNoSnapshot, also cached
	loaded  time.Time
	expired atomic.Bool // set by a timer CacheTTL after loaded (real clock)
}

// fresh reports whether v may still be served. On the real clock a timer
// marks it stale, so that the reader's path reads no clock (a clock read
// costs more than the rest of it); an injected clock is read instead.
func (l *List) fresh(v *view) bool {
	if l.realClock {
		return !v.expired.Load()
	}
	return l.cfg.Now().Sub(v.loaded) < l.cfg.CacheTTL
}

// TopCached returns the first n entries of the latest snapshot (controls
// applied, as Snapshot) from a copy held in this process, read from Redis at
// most once per CacheTTL: concurrent readers share one read and, while the
// copy is fresh, no reader touches Redis. What it serves is at most CacheTTL
// older than the latest snapshot, which is at most Refresh older than Top
// (while a publisher runs), which lags the events by the flush interval plus
// the consumers' lag. The returned slice is shared: do not modify it.
func (l *List) TopCached(ctx context.Context, n int) ([]Entry, error) {
	v := l.cached.Load()
	if v == nil || !l.fresh(v) {
		got, err, _ := l.flight.Do("snapshot", func() (any, error) {
			snap, err := l.Snapshot(ctx)
			if err != nil && !errors.Is(err, ErrNoSnapshot) {
				return nil, err
			}
			fresh := &view{snap: snap, err: err, loaded: l.cfg.Now()}
			if l.realClock {
				time.AfterFunc(l.cfg.CacheTTL, func() { fresh.expired.Store(true) })
			}
			l.cached.Store(fresh)
			return fresh, nil
		})
		if err != nil {
			return nil, err
		}
		v = got.(*view)
	}
	if v.err != nil {
		return nil, v.err
	}
	return v.snap.Entries[:min(max(n, 0), len(v.snap.Entries))], nil
}

// Pin places item at position (1..SnapshotSize) in every snapshot read from
// now on, whatever its heat, until Unpin. Pinned items at one position are
// ordered by name.
func (l *List) Pin(ctx context.Context, item string, position int) (err error) {
	ctx, call := l.obs.pin.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := checkItem(item); err != nil {
		return err
	}
	if position < 1 || position > l.cfg.SnapshotSize {
		return fmt.Errorf("%w: pin position %d outside 1..%d", ErrInvalid, position, l.cfg.SnapshotSize)
	}
	if err := l.c.HSet(ctx, l.pins, item, position).Err(); err != nil {
		return fmt.Errorf("hotlist: pin %q: %w", item, err)
	}
	return nil
}

// Unpin removes item's pin.
func (l *List) Unpin(ctx context.Context, item string) (err error) {
	ctx, call := l.obs.unpin.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := l.c.HDel(ctx, l.pins, item).Err(); err != nil {
		return fmt.Errorf("hotlist: unpin %q: %w", item, err)
	}
	return nil
}

// Block keeps item out of every snapshot read from now on (and out of those
// published later), until Unblock. A block beats a pin.
func (l *List) Block(ctx context.Context, item string) (err error) {
	ctx, call := l.obs.blockItem.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := checkItem(item); err != nil {
		return err
	}
	if err := l.c.SAdd(ctx, l.block, item).Err(); err != nil {
		return fmt.Errorf("hotlist: block %q: %w", item, err)
	}
	return nil
}

// Unblock lifts item's block.
func (l *List) Unblock(ctx context.Context, item string) (err error) {
	ctx, call := l.obs.unblock.Start(ctx)
	defer func() { err = call.End(err) }()
	if err := l.c.SRem(ctx, l.block, item).Err(); err != nil {
		return fmt.Errorf("hotlist: unblock %q: %w", item, err)
	}
	return nil
}

func checkItem(item string) error {
	if item == "" || len(item) > MaxItem {
		return fmt.Errorf("%w: item of %d bytes (1..%d)", ErrInvalid, len(item), MaxItem)
	}
	return nil
}

// applyControls removes blocked items, places pinned ones and renumbers,
// keeping at most SnapshotSize entries.
func (l *List) applyControls(entries []Entry, pins map[string]string, blocked []string) []Entry {
	type pin struct {
		item string
		pos  int
	}
	var ps []pin
	for item, v := range pins {
		pos, err := strconv.Atoi(v)
		if err == nil && pos >= 1 && !slices.Contains(blocked, item) {
			ps = append(ps, pin{item, pos})
		}
	}
	slices.SortFunc(ps, func(a, b pin) int {
		return cmp.Or(cmp.Compare(a.pos, b.pos), strings.Compare(a.item, b.item))
	})
	out := make([]Entry, 0, len(entries)+len(ps))
	organic := make(map[string]Entry, len(ps))
	for _, e := range entries {
		if pins[e.Item] != "" {
			organic[e.Item] = e
			continue
		}
		if !slices.Contains(blocked, e.Item) {
			out = append(out, e)
		}
	}
	// Each pin goes to its position; the later ones (by name) of a position
	// already taken by a pin go just after it, and a pin at the next
	// position still gets its own.
	for i, p := range ps {
		e, ok := organic[p.item]
		if !ok {
			e = Entry{Item: p.item}
		}
		e.Pinned = true
		at := p.pos - 1
		for j := i - 1; j >= 0 && ps[j].pos == p.pos; j-- {
			at++
		}
		out = slices.Insert(out, min(at, len(out)), e)
	}
	out = out[:min(len(out), l.cfg.SnapshotSize)]
	for i := range out {
		out[i].Rank = i + 1
	}
	return out
}

// Snapshot encoding, version 1 (canonical varints):
//
//	snapshot = version:byte(1) at:uvarint(unix ms) count:uvarint entry×count
//	entry    = itemLen:uvarint item heat:float64 (8 bytes, little endian)
//	           rank:uvarint previousRank:uvarint (0: new)
const snapshotVersion = 1

func encodeSnapshot(s Snapshot) []byte {
	out := []byte{snapshotVersion}
	out = binary.AppendUvarint(out, uint64(s.At.UnixMilli()))
	out = binary.AppendUvarint(out, uint64(len(s.Entries)))
	for _, e := range s.Entries {
		out = binary.AppendUvarint(out, uint64(len(e.Item)))
		out = append(out, e.Item...)
		out = binary.LittleEndian.AppendUint64(out, math.Float64bits(e.Heat))
		out = binary.AppendUvarint(out, uint64(e.Rank))
		prev := 0
		if !e.New {
			prev = e.Rank + e.Change
		}
		out = binary.AppendUvarint(out, uint64(prev))
	}
	return out
}

func decodeSnapshot(data []byte) (Snapshot, error) {
	d := decoder{b: data}
	if v := d.byte(); d.err == nil && v != snapshotVersion {
		return Snapshot{}, fmt.Errorf("snapshot version %d (want %d)", v, snapshotVersion)
	}
	at := d.uvarint()
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b))/12 { // an entry takes 12 bytes at least
		d.fail("entry count larger than the data")
	}
	if d.err == nil && at >= maxMillis {
		d.fail("time out of range")
	}
	s := Snapshot{At: time.UnixMilli(int64(at)).UTC()}
	for i := uint64(0); i < n && d.err == nil; i++ {
		e := Entry{Item: string(d.bytes(MaxItem))}
		e.Heat = math.Float64frombits(d.fixed64())
		rank, prev := d.uvarint(), d.uvarint()
		if rank != i+1 || prev > 1<<30 {
			d.fail(fmt.Sprintf("entry %d has rank %d, previous rank %d", i, rank, prev))
		}
		e.Rank = int(rank)
		if prev == 0 {
			e.New = true
		} else {
			e.Change = int(prev) - e.Rank
		}
		s.Entries = append(s.Entries, e)
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return Snapshot{}, fmt.Errorf("bad snapshot: %w", d.err)
	}
	return s, nil
}

func (d *decoder) fixed64() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("truncated")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}
