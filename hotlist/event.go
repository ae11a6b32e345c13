package hotlist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Kind is what an event did to an item. Its weight comes from Config.Weights.
// Kind 0 is invalid.
type Kind uint8

// The kinds of the default weights. Other kinds (1..255) may be given
// weights in Config.Weights.
const (
	View    Kind = 1
	Like    Kind = 2
	Repost  Kind = 3
	Comment Kind = 4
)

// DefaultWeights are the weights used when Config.Weights is nil: a like
// counts half a repost (Twitter's published recap), a comment 13.5 reposts
// (the low end of its 13.5–27 for a reply), a view 1/200 of one.
func DefaultWeights() map[Kind]float64 {
	return map[Kind]float64{View: 0.005, Like: 0.5, Repost: 1, Comment: 13.5}
}

// Event is one interaction with an item.
type Event struct {
	Item string    // 1..MaxItem bytes
	Kind Kind      // not 0
	At   time.Time // when it happened, to the millisecond
	User string    // optional, 0..MaxUser bytes without NUL; likes need it when Config.DedupLikes is set
}

// Limits of the batch encoding.
const (
	MaxItem        = 256     // bytes in an item id
	MaxUser        = 128     // bytes in a user id
	MaxBatchEvents = 1 << 16 // events in one batch
	// BatchVersion is the first byte of every encoded batch.
	BatchVersion = 1
)

// maxMillis bounds event times (year 6429), so that deltas and sums of them
// never overflow and every time converts to a float64 exactly.
const maxMillis = 1 << 47

// ErrMalformed is returned for a batch that does not decode (and by
// AppendBatch for an event it cannot encode). A malformed batch is rejected
// whole: none of its events is applied.
var ErrMalformed = errors.New("hotlist: malformed batch")

// Batch encoding, version 1 — every integer a canonical (shortest) varint:
//
//	batch = version:byte(1) count:uvarint(1..65536) event×count
//	event = flags:byte kind:byte itemLen:uvarint item dt:varint [userLen:uvarint user]
//
// flags bit 0 says a user follows; the other bits are 0. kind is not 0. dt is
// the event's Unix time in milliseconds minus the previous event's (the first
// event's is its own Unix time), zigzag-encoded; every time lies in
// [0, 2^47) ms. Nothing may follow the last event. The decoder rejects
// anything else, so a batch decodes to one list of events and that list
// encodes back to the same bytes.
const flagUser = 1

// AppendBatch appends the encoding of events to dst. It returns an error
// wrapping ErrMalformed, and dst unchanged, if an event cannot be encoded.
func AppendBatch(dst []byte, events []Event) ([]byte, error) {
	if len(events) == 0 || len(events) > MaxBatchEvents {
		return dst, fmt.Errorf("%w: %d events (1..%d)", ErrMalformed, len(events), MaxBatchEvents)
	}
	out := append(dst, BatchVersion)
	out = binary.AppendUvarint(out, uint64(len(events)))
	var prev int64
	for i, e := range events {
		ms := e.At.UnixMilli()
		if err := checkEvent(e.Item, e.User, e.Kind, ms); err != nil {
			return dst, fmt.Errorf("%w: event %d: %v", ErrMalformed, i, err)
		}
		var flags byte
		if e.User != "" {
			flags |= flagUser
		}
		out = append(out, flags, byte(e.Kind))
		out = binary.AppendUvarint(out, uint64(len(e.Item)))
		out = append(out, e.Item...)
		out = binary.AppendVarint(out, ms-prev)
		prev = ms
		if e.User != "" {
			out = binary.AppendUvarint(out, uint64(len(e.User)))
			out = append(out, e.User...)
		}
	}
	return out, nil
}

func checkEvent[S string | []byte](item, user S, kind Kind, ms int64) error {
	switch {
	case len(item) == 0 || len(item) > MaxItem:
		return fmt.Errorf("item of %d bytes (1..%d)", len(item), MaxItem)
	case len(user) > MaxUser:
		return fmt.Errorf("user of %d bytes (0..%d)", len(user), MaxUser)
	case hasNUL(user):
		return errors.New("user contains NUL")
	case kind == 0:
		return errors.New("kind 0")
	case ms < 0 || ms >= maxMillis:
		return fmt.Errorf("time %d ms outside [0, 2^47)", ms)
	}
	return nil
}

func hasNUL[S string | []byte](s S) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// DecodeBatch decodes a batch made by AppendBatch. Malformed input returns
// an error wrapping ErrMalformed and no events; it never panics.
func DecodeBatch(data []byte) ([]Event, error) {
	var raw []rawEvent
	raw, err := decodeBatch(data, raw)
	if err != nil {
		return nil, err
	}
	events := make([]Event, len(raw))
	for i, r := range raw {
		events[i] = Event{Item: string(r.item), Kind: r.kind, At: time.UnixMilli(r.ms).UTC(), User: string(r.user)}
	}
	return events, nil
}

// rawEvent is a decoded event whose ids still point into the batch.
type rawEvent struct {
	item, user []byte
	kind       Kind
	ms         int64
}

// decodeBatch decodes data into buf[:0] (reused to spare allocations).
func decodeBatch(data []byte, buf []rawEvent) ([]rawEvent, error) {
	d := decoder{b: data}
	if v := d.byte(); d.err == nil && v != BatchVersion {
		return nil, fmt.Errorf("%w: version %d (want %d)", ErrMalformed, v, BatchVersion)
	}
	n := d.uvarint()
	// Every event takes at least 4 bytes: a count larger than the rest could
	// hold is a lie, caught before it sizes an allocation.
	if d.err == nil && (n == 0 || n > MaxBatchEvents || n > uint64(len(d.b))/4) {
		return nil, fmt.Errorf("%w: count %d with %d bytes left", ErrMalformed, n, len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, d.err)
	}
	out := buf[:0]
	var ms int64
	for i := range n {
		e, err := d.event(&ms)
		if err != nil {
			return nil, fmt.Errorf("%w: event %d: %v", ErrMalformed, i, err)
		}
		out = append(out, e)
	}
	if len(d.b) > 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last event", ErrMalformed, len(d.b))
	}
	return out, nil
}

// event reads one event; *ms is the previous event's time, then this one's.
func (d *decoder) event(ms *int64) (rawEvent, error) {
	var e rawEvent
	flags := d.byte()
	e.kind = Kind(d.byte())
	e.item = d.bytes(MaxItem)
	*ms += d.varint()
	e.ms = *ms
	if flags&flagUser != 0 {
		if e.user = d.bytes(MaxUser); len(e.user) == 0 {
			d.fail("empty user with the user flag set")
		}
	}
	switch {
	case d.err != nil:
		return e, d.err
	case flags&^flagUser != 0:
		return e, fmt.Errorf("unknown flags %#x", flags)
	}
	return e, checkEvent(e.item, e.user, e.kind, e.ms)
}

// decoder reads from b; the first failure sticks and later reads return 0.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = errors.New(msg)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) > 0 && d.b[0] < 0x80 { // one byte: most lengths
		v := uint64(d.b[0])
		d.b = d.b[1:]
		return v
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	if n > 1 && d.b[n-1] == 0 { // a trailing zero group: not the shortest form
		d.fail("non-canonical varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	u := d.uvarint()
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	// A delta this large would take the time out of [0, 2^47) whatever the
	// running sum; refusing it here keeps the sum from overflowing.
	if v <= -maxMillis || v >= maxMillis {
		d.fail("time delta out of range")
		return 0
	}
	return v
}

func (d *decoder) bytes(limit int) []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(limit) || n > uint64(len(d.b)) {
		d.fail(fmt.Sprintf("length %d (limit %d, %d bytes left)", n, limit, len(d.b)))
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}
