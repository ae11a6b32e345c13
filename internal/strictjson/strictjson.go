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
	"reflect"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// ErrTrailing is returned for data after the value.
var ErrTrailing = errors.New("data after the value")

// ErrNotObject is returned when the value is not a JSON object (null too).
var ErrNotObject = errors.New("not a JSON object")

// ErrMissing is returned, wrapped with the member's name, when a field
// without omitempty or omitzero is absent.
var ErrMissing = errors.New("missing member")

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
	return checkRequired(data, v)
}

// checkRequired reports the first field of v's struct without omitempty or
// omitzero whose name is not a member of data's top-level object.
func checkRequired(data []byte, v any) error {
	required := requiredNames(reflect.TypeOf(v))
	if len(required) == 0 {
		return nil
	}
	var members map[string]jsontext.Value
	if err := json.Unmarshal(data, &members); err != nil {
		return err
	}
	for _, name := range required {
		if _, ok := members[name]; !ok {
			return fmt.Errorf("%w %q", ErrMissing, name)
		}
	}
	return nil
}

// requiredNames lists the JSON names of a struct's fields that have no
// omitempty or omitzero (t is the struct or a pointer to it).
func requiredNames(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for f := range t.Fields() {
		tag, ok := f.Tag.Lookup("json")
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" { // an embedded struct: its fields are the object's
			names = append(names, requiredNames(f.Type)...)
			continue
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		if !ok || name == "" {
			name = f.Name
		}
		if opts := "," + opts + ","; strings.Contains(opts, ",omitempty,") || strings.Contains(opts, ",omitzero,") {
			continue
		}
		names = append(names, name)
	}
	return names
}
