package shortlink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
)

// maxBody bounds a JSON request body.
const maxBody = 16 << 10

// errBody is wrapped by malformed request bodies.
var errBody = errors.New("bad JSON")

// readJSON reads r's body, one JSON object, into v (a pointer to a struct).
// It is stricter than encoding/json, so that no proxy or client library
// reading the same bytes can see another request: field names must match
// v's json tags exactly (encoding/json folds case) and appear at most once
// (it keeps the last), and nothing but white space may follow the object.
// A body over maxBody is a *http.MaxBytesError.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return err
	}
	if err := checkFields(body, jsonFields(v)); err != nil {
		return fmt.Errorf("%w: %w", errBody, err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %w", errBody, err)
	}
	return nil
}

// checkFields walks the top level of one JSON object: every key one of
// fields, none twice, and nothing after the object.
func checkFields(body []byte, fields map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		switch {
		case !fields[key]:
			return fmt.Errorf("unknown field %q", key)
		case seen[key]:
			return fmt.Errorf("field %q given twice", key)
		}
		seen[key] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON object")
	}
	return nil
}

// jsonFields returns the json names of the fields of the struct v points to.
func jsonFields(v any) map[string]bool {
	t := reflect.TypeOf(v).Elem()
	fields := make(map[string]bool, t.NumField())
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			fields[name] = true
		}
	}
	return fields
}
