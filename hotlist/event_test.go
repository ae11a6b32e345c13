package hotlist_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/internal/testenv"
)

var t0 = testenv.Now().UTC().Truncate(time.Hour)

func randomEvents(rng *rand.Rand, n int) []hotlist.Event {
	events := make([]hotlist.Event, n)
	at := t0
	for i := range events {
		at = at.Add(time.Duration(rng.IntN(2000)-500) * time.Millisecond) // times go back, too
		events[i] = hotlist.Event{Item: "item-" + strings.Repeat("x", rng.IntN(5)) + string(rune('a'+rng.IntN(26))), Kind: hotlist.Kind(1 + rng.IntN(255)), At: at}
		if rng.IntN(2) == 0 {
			events[i].User = "u" + string(rune('0'+rng.IntN(10)))
		}
	}
	return events
}

func TestBatchRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 17, 1000} {
		events := randomEvents(rng, n)
		data, err := hotlist.AppendBatch(nil, events)
		if err != nil {
			t.Fatal(err)
		}
		got, err := hotlist.DecodeBatch(data)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, events) {
			t.Fatalf("%d events: round trip changed them", n)
		}
	}
	// Limits are inclusive and binary ids survive.
	edge := []hotlist.Event{
		{Item: strings.Repeat("i", hotlist.MaxItem), Kind: 255, At: time.UnixMilli(0).UTC(), User: strings.Repeat("u", hotlist.MaxUser)},
		{Item: "\x00{}\xff", Kind: 1, At: time.UnixMilli(1<<47 - 1).UTC()},
	}
	data, err := hotlist.AppendBatch([]byte("prefix"), edge)
	if err != nil || !bytes.HasPrefix(data, []byte("prefix")) {
		t.Fatalf("AppendBatch: %v", err)
	}
	if got, err := hotlist.DecodeBatch(data[len("prefix"):]); err != nil || !reflect.DeepEqual(got, edge) {
		t.Fatalf("edge events: %v, %+v", err, got)
	}
}

func TestAppendBatchRefusesWhatItCannotEncode(t *testing.T) {
	ok := hotlist.Event{Item: "a", Kind: hotlist.Like, At: t0}
	for name, e := range map[string]hotlist.Event{
		"empty item":    {Kind: hotlist.Like, At: t0},
		"long item":     {Item: strings.Repeat("i", hotlist.MaxItem+1), Kind: hotlist.Like, At: t0},
		"long user":     {Item: "a", Kind: hotlist.Like, At: t0, User: strings.Repeat("u", hotlist.MaxUser+1)},
		"NUL in user":   {Item: "a", Kind: hotlist.Like, At: t0, User: "u\x00v"},
		"kind 0":        {Item: "a", At: t0},
		"before 1970":   {Item: "a", Kind: hotlist.Like, At: time.UnixMilli(-1)},
		"after 2^47 ms": {Item: "a", Kind: hotlist.Like, At: time.UnixMilli(1 << 47)},
	} {
		dst := []byte("keep")
		got, err := hotlist.AppendBatch(dst, []hotlist.Event{ok, e})
		if !errors.Is(err, hotlist.ErrMalformed) || string(got) != "keep" {
			t.Errorf("%s: %v, %q", name, err, got)
		}
	}
	if _, err := hotlist.AppendBatch(nil, nil); !errors.Is(err, hotlist.ErrMalformed) {
		t.Errorf("empty batch: %v", err)
	}
}

func TestDecodeBatchRejectsMalformed(t *testing.T) {
	good, _ := hotlist.AppendBatch(nil, []hotlist.Event{{Item: "ab", Kind: 2, At: t0, User: "u"}})
	// good = 01 01 | 01 02 02 'a' 'b' <varint time> 01 'u'
	withCount := func(n uint64) []byte {
		return append(binary.AppendUvarint([]byte{1}, n), good[2:]...)
	}
	cases := map[string][]byte{
		"empty":              {},
		"version 2":          append([]byte{2}, good[1:]...),
		"count 0":            {1, 0},
		"count too large":    withCount(2),
		"count past limit":   withCount(hotlist.MaxBatchEvents + 1),
		"truncated":          good[:len(good)-1],
		"trailing byte":      append(append([]byte{}, good...), 0),
		"unknown flag":       append([]byte{1, 1, 3}, good[3:]...),
		"kind 0":             append([]byte{1, 1, 1, 0}, good[4:]...),
		"item length 0":      {1, 1, 0, 2, 0, 0},
		"non-canonical":      {1, 0x81, 0x00, 0, 2, 1, 'a', 0},
		"user flag, no user": append(append([]byte{1, 1, 1, 2}, good[4:len(good)-2]...), 0),
		"negative time":      {1, 1, 0, 2, 1, 'a', 1},
		"overlong varint":    {1, 1, 0, 2, 1, 'a', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	}
	if _, err := hotlist.DecodeBatch(good); err != nil {
		t.Fatalf("good batch: %v", err)
	}
	for name, data := range cases {
		events, err := hotlist.DecodeBatch(data)
		if !errors.Is(err, hotlist.ErrMalformed) || events != nil {
			t.Errorf("%s: %v, %v", name, events, err)
		}
	}
}

// FuzzDecodeBatch: the decoder never panics, and whatever it accepts encodes
// back to the very same bytes (the encoding is canonical); whatever the
// encoder makes, the decoder returns as it was.
func FuzzDecodeBatch(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 3, 20} {
		data, _ := hotlist.AppendBatch(nil, randomEvents(rng, n))
		f.Add(data)
	}
	f.Add([]byte{1, 1, 0, 2, 1, 'a', 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		events, err := hotlist.DecodeBatch(data)
		if err != nil {
			if !errors.Is(err, hotlist.ErrMalformed) || events != nil {
				t.Fatalf("error %v with events %v", err, events)
			}
			return
		}
		again, err := hotlist.AppendBatch(nil, events)
		if err != nil {
			t.Fatalf("decoded events do not encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", data, again)
		}
		back, err := hotlist.DecodeBatch(again)
		if err != nil || !reflect.DeepEqual(back, events) {
			t.Fatalf("round trip: %v", err)
		}
	})
}
