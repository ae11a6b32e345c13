// Package strictjson decodes the versioned JSON messages and bodies the
// blocks accept from outside (Kafka messages, payment callbacks, request
// bodies) so that every reader of the same bytes sees the same value: one
// JSON object, each member named exactly as a field's tag (case and all)
// and given once, every field that has no omitempty or omitzero present,
// valid UTF-8, nothing after it.
//
// encoding/json (v1) is not strict enough for that: it keeps the last of
// duplicated names and folds case, so {"amount":1,"AMOUNT":9} or a lone
// "Amount" decode to a value that a signer, a proxy or another language's
// parser reads differently — the parser-mismatch hole of signed payment
// callbacks. It also replaces invalid UTF-8 and reads null and {} as a
// zero value. Decoding is by github.com/go-json-experiment/json (the
// encoding/json/v2 proposal), whose defaults refuse duplicates, match names
// exactly and refuse invalid UTF-8; this package adds unknown members,
// a top-level object and required fields.
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"strings"
	"sync"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// ErrTrailing is returned for data after the value.
var ErrTrailing = errors.New("strictjson: data after the value")

// ErrNotObject is returned when the value is not a JSON object (null too).
var ErrNotObject = errors.New("strictjson: not a JSON object")

// ErrMissing is returned, wrapped with the member's name, when a field
// without omitempty or omitzero is absent — at any depth: in the object,
// and in every object inside it that decodes into a struct.
var ErrMissing = errors.New("strictjson: missing member")

// Decode parses data, one JSON object, into v, a pointer to a struct.
func Decode(data []byte, v any) error {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return ErrNotObject
	}
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	if err := json.UnmarshalDecode(dec, v, json.RejectUnknownMembers(true)); err != nil {
		return err
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return ErrTrailing
	}
	t := reflect.TypeOf(v)
	walk, ok := needsWalk.Load(t)
	if !ok {
		walk, _ = needsWalk.LoadOrStore(t, hasRequired(t, map[reflect.Type]bool{}))
	}
	if !walk.(bool) {
		return nil
	}
	return checkRequired(jsontext.NewDecoder(bytes.NewReader(data)), t)
}

// needsWalk caches hasRequired by the type decoded into.
var needsWalk sync.Map // reflect.Type → bool

// checkRequired walks the value dec is at, which decoded into a t, and
// reports the first required member missing from an object that decoded
// into a struct. Values that hold no struct are skipped, not parsed.
func checkRequired(dec *jsontext.Decoder, t reflect.Type) error {
	if t == nil { // not a field (Decode refused unknown members already)
		return dec.SkipValue()
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if dec.PeekKind() == 'n' { // null: present, and nothing inside
		_, err := dec.ReadToken()
		return err
	}
	switch t.Kind() {
	case reflect.Struct:
		if dec.PeekKind() != '{' { // a struct read from another kind: time.Time, an Unmarshaler
			return dec.SkipValue()
		}
		if _, err := dec.ReadToken(); err != nil { // '{'
			return err
		}
		members, required := structMembers(t)
		seen := make(map[string]bool, len(required))
		for dec.PeekKind() != '}' {
			name, err := dec.ReadToken()
			if err != nil {
				return err
			}
			seen[name.String()] = true
			if err := checkRequired(dec, members[name.String()]); err != nil {
				return err
			}
		}
		if _, err := dec.ReadToken(); err != nil { // '}'
			return err
		}
		for _, name := range required {
			if !seen[name] {
				return fmt.Errorf("%w %q", ErrMissing, name)
			}
		}
		return nil
	case reflect.Slice, reflect.Array:
		if dec.PeekKind() != '[' || !hasRequired(t.Elem(), map[reflect.Type]bool{}) {
			return dec.SkipValue()
		}
		if _, err := dec.ReadToken(); err != nil { // '['
			return err
		}
		for dec.PeekKind() != ']' {
			if err := checkRequired(dec, t.Elem()); err != nil {
				return err
			}
		}
		_, err := dec.ReadToken()
		return err
	}
	return dec.SkipValue()
}

// structMembers maps the JSON names of a struct's fields (those of embedded
// structs promoted) to their types, and lists the required ones: those
// without omitempty or omitzero.
func structMembers(t reflect.Type) (map[string]reflect.Type, []string) {
	members := map[string]reflect.Type{}
	var required []string
	for f := range t.Fields() {
		tag, ok := f.Tag.Lookup("json")
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" { // an embedded struct: its fields are the object's
			et := f.Type
			for et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				m, r := structMembers(et)
				maps.Copy(members, m)
				required = append(required, r...)
				continue
			}
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		if !ok || name == "" {
			name = f.Name
		}
		members[name] = f.Type
		if opts := "," + opts + ","; !strings.Contains(opts, ",omitempty,") && !strings.Contains(opts, ",omitzero,") {
			required = append(required, name)
		}
	}
	return members, required
}

// hasRequired reports whether a value of type t can hold a struct with a
// required member (seen guards recursive types).
func hasRequired(t reflect.Type, seen map[reflect.Type]bool) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return false
	}
	seen[t] = true
	members, required := structMembers(t)
	if len(required) > 0 {
		return true
	}
	for _, mt := range members {
		if hasRequired(mt, seen) {
			return true
		}
	}
	return false
}
