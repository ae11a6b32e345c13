package strictjson

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

type item struct {
	User   string `json:"user"`
	Amount int64  `json:"amount"`
}

// msg has the shapes the blocks' messages have: numbers, strings, an
// optional member and a list of objects.
type msg struct {
	V      int    `json:"v"`
	S      string `json:"s"`
	Reason string `json:"reason,omitempty"`
	Items  []item `json:"items"`
}

func TestDecode(t *testing.T) {
	const ok = `{"v":1,"s":"x","items":[{"user":"a","amount":5}]}`
	for in, want := range map[string]error{
		ok: nil,
		" {\"v\":1,\"s\":\"\",\"items\":[]}\n\t ": nil,
		`{"v":1,"s":"x","items":null}`:            nil,    // present, empty
		`{"v":1,"s":"x","items":[],"reason":"r"}`: nil,    // the optional member
		`{"v":1,"s":"x","items":[],"x":2}`:        errAny, // unknown member
		`{"v":1,"s":"x","items":[]} {}`:           ErrTrailing,
		`{"v":1,"s":"x","items":[]}]`:             ErrTrailing,
		`{"v":1,"s":"x","items":[]} garbage`:      ErrTrailing,
		`{"v":"1","s":"x","items":[]}`:            errAny,
		`{"v":1,"s":"x","items":[]`:               errAny,
		``:                                        ErrNotObject,
		`null`:                                    ErrNotObject,
		`[]`:                                      ErrNotObject,
		`1`:                                       ErrNotObject,
		`{}`:                                      ErrMissing,
		`{"v":1,"items":[]}`:                      ErrMissing,
		`{"v":1,"v":2,"s":"x","items":[]}`:        errAny, // a duplicate: v1 kept the last
		`{"v":1,"V":2,"s":"x","items":[]}`:        errAny, // a case variant beside the name
		`{"V":1,"s":"x","items":[]}`:              errAny, // a case variant alone: v1 matched it
		`{"v":1,"s":"x","items":[],"Reason":"r"}`: errAny,
		`{"v":1,"s":"x","items":[{"user":"a","amount":5,"amount":500}]}`: errAny, // nested duplicate
		`{"v":1,"s":"x","items":[{"user":"a","AMOUNT":5}]}`:              errAny, // nested case variant
		`{"v":1,"s":"x","items":[{"user":"a","amount":5,"x":1}]}`:        errAny,
		`{"v":1,"s":"x","items":[{"user":"a"}]}`:                         ErrMissing, // nested: amount would read as 0
		`{"v":1,"s":"x","items":[{"user":"a","amount":1},{}]}`:           ErrMissing,
		`{"v":1,"s":"\ud800","items":[]}`:                                errAny, // a lone surrogate: encoding/json made it U+FFFD
		`{"v":1,"s":"\ud83d\ude00","items":[]}`:                          nil,    // a pair is one character
		"{\"v\":1,\"s\":\"\xff\",\"items\":[]}":                          errAny, // invalid UTF-8: v1 made it U+FFFD
		`{"v":1,"s":"\u0041","items":[]}`:                                nil,
		`{"v":1,"s":"x","\u0076":2,"items":[]}`:                          errAny, // "v" spelt as an escape, twice
	} {
		var m msg
		err := Decode([]byte(in), &m)
		switch {
		case want == nil && err != nil:
			t.Errorf("%q: %v, want it accepted", in, err)
		case want != nil && err == nil:
			t.Errorf("%q: accepted as %+v, want an error", in, m)
		case want != nil && want != errAny && !errors.Is(err, want):
			t.Errorf("%q: %v, want %v", in, err, want)
		}
	}
	var m msg
	if err := Decode([]byte(ok), &m); err != nil || !reflect.DeepEqual(m, msg{V: 1, S: "x", Items: []item{{"a", 5}}}) {
		t.Fatalf("decoded %+v, %v", m, err)
	}
}

// errAny stands for any error in TestDecode's table.
var errAny = errors.New("any error")

// FuzzDecode checks Decode against an oracle built from other parts:
// encoding/json (unknown fields refused) for the value, and a token walk
// for what encoding/json lets through — a top-level object, names exactly
// the fields' and each at most once per object, required members present,
// valid UTF-8 in every string. Both must accept the same inputs, and
// decode the accepted ones to the same value.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"s":"x","items":[{"user":"a","amount":5}]}`,
		`{"v":1,"s":"x","items":[],"reason":"r"}`,
		`{"v":1,"v":2,"s":"x","items":[]}`,
		`{"V":1,"s":"x","items":[]}`,
		`{"v":1,"s":"x","items":[{"user":"a","AMOUNT":5}]}`,
		`{"v":1,"s":"x","items":[]} {}`,
		`null`, `{}`, "{\"v\":1,\"s\":\"\xff\",\"items\":[]}",
		`{"v":1,"s":"x","\u0076":2,"items":[]}`,
		`{"v":1,"s":"\ud800","items":[]}`, `{"v":1,"s":"x","items":[{"user":"a"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got msg
		err := Decode(data, &got)
		want, why := oracle(data)
		if (err == nil) != (why == "") {
			t.Fatalf("%q: Decode says %v, the oracle %q", data, err, why)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: Decode read %+v, encoding/json %+v", data, got, want)
		}
	})
}

// oracle decodes data into a msg with encoding/json and walks its tokens;
// it returns why it refuses the input, or "" and the value.
func oracle(data []byte) (msg, string) {
	var m msg
	dec := stdjson.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, "encoding/json: " + err.Error()
	}
	if _, err := dec.Token(); err != io.EOF {
		return m, "trailing data"
	}
	if !utf8.Valid(data) {
		return m, "invalid UTF-8" // outside strings too: encoding/json refuses those bytes anyway
	}
	if loneSurrogate(data) {
		return m, "a lone surrogate escape"
	}
	top := map[string]bool{"v": true, "s": true, "reason": true, "items": true}
	inner := map[string]bool{"user": true, "amount": true}
	t := stdjson.NewDecoder(bytes.NewReader(data))
	if tok, _ := t.Token(); tok != stdjson.Delim('{') {
		return m, "not an object"
	}
	seen, why := walkObject(t, top, inner)
	if why != "" {
		return m, why
	}
	for _, name := range []string{"v", "s", "items"} {
		if !seen[name] {
			return m, "missing " + name
		}
	}
	return m, ""
}

// walkObject reads an object's members after its '{': each name one of
// names and given once; the objects in "items" are walked with inner.
func walkObject(t *stdjson.Decoder, names, inner map[string]bool) (map[string]bool, string) {
	seen := map[string]bool{}
	for t.More() {
		tok, err := t.Token()
		if err != nil {
			return nil, err.Error()
		}
		name := tok.(string)
		if !names[name] {
			return nil, "name " + name + " not exactly a field's"
		}
		if seen[name] {
			return nil, "name " + name + " twice"
		}
		seen[name] = true
		if name != "items" {
			var skip stdjson.RawMessage
			if err := t.Decode(&skip); err != nil {
				return nil, err.Error()
			}
			continue
		}
		tok, _ = t.Token()
		if tok == nil { // items: null
			continue
		}
		for t.More() {
			if tok, _ := t.Token(); tok != stdjson.Delim('{') {
				return nil, "an item is not an object"
			}
			seenInner, why := walkObject(t, inner, nil)
			if why != "" {
				return nil, why
			}
			for _, name := range []string{"user", "amount"} {
				if !seenInner[name] {
					return nil, "an item misses " + name
				}
			}
		}
		t.Token() // ']'
	}
	t.Token() // '}'
	return seen, ""
}

// loneSurrogate reports a \uD800–\uDFFF escape that is not a high
// surrogate followed by a low one (data is JSON whose strings are the only
// place an escape can be).
func loneSurrogate(data []byte) bool {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // another escape: skip the escaped byte
			continue
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true // a low surrogate first
		case r >= 0xD800 && r <= 0xDBFF:
			lo, ok := hex4(i + 6)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}

func TestRequiredMembers(t *testing.T) {
	type tagged struct {
		A int `json:"a"`
		B int `json:"b,omitempty"`
		C int `json:"c,omitzero"`
		D int `json:"-"`
		E int
		f int
		G int `json:",string"`
	}
	_ = tagged{}.f
	if _, got := structMembers(reflect.TypeOf(tagged{})); strings.Join(got, " ") != "a E G" {
		t.Fatalf("required: %s", got)
	}
	type embedding struct {
		V int `json:"v"`
		item
		Named item `json:"named,omitempty"`
	}
	if _, got := structMembers(reflect.TypeOf(embedding{})); strings.Join(got, " ") != "v user amount" {
		t.Fatalf("required with an embedded struct: %s", got)
	}
	type stamped struct {
		At   time.Time `json:"at"`
		Tags []string  `json:"tags"`
	}
	var st stamped
	if err := Decode([]byte(`{"at":"2006-01-02T15:04:05Z","tags":["a"]}`), &st); err != nil || st.At.IsZero() || len(st.Tags) != 1 {
		t.Fatalf("a time.Time member (a struct read from a string): %+v %v", st, err)
	}
	var e embedding
	if err := Decode([]byte(`{"v":1,"user":"a","amount":2}`), &e); err != nil || e.User != "a" || e.Amount != 2 {
		t.Fatalf("embedded members: %+v %v", e, err)
	}
	if err := Decode([]byte(`{"v":1,"user":"a"}`), &e); !errors.Is(err, ErrMissing) {
		t.Fatalf("an embedded member missing: %v", err)
	}
}
