// Package strictjson decodes the versioned JSON messages and bodies the
// blocks accept from outside (Kafka messages, payment callbacks): exactly one
// value, no field the type does not have, nothing after it.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// ErrTrailing is returned for data after the value.
var ErrTrailing = errors.New("data after the value")

// Decode parses data into v, refusing unknown object fields and anything
// but white space after the one value.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ErrTrailing
	}
	return nil
}
