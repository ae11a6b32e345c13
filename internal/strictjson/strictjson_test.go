package strictjson

import (
	"errors"
	"testing"
)

func TestDecode(t *testing.T) {
	type msg struct {
		V int    `json:"v"`
		S string `json:"s"`
	}
	for in, ok := range map[string]bool{
		`{"v":1,"s":"x"}`:          true,
		" {\"v\":1}\n\t ":          true,
		`{"v":1,"x":2}`:            false, // unknown field
		`{"v":1} {}`:               false, // a second value
		`{"v":1}]`:                 false, // a stray delimiter (Decoder.More misses it)
		`{"v":1} garbage`:          false,
		`{"v":"1"}`:                false,
		`{"v":1`:                   false,
		``:                         false,
		`{"v":1,"s":{"nested":1}}`: false,
	} {
		var m msg
		err := Decode([]byte(in), &m)
		if (err == nil) != ok {
			t.Errorf("%q: %v, want ok=%v", in, err, ok)
		}
	}
	var m msg
	if err := Decode([]byte(`{"v":1}x`), &m); !errors.Is(err, ErrTrailing) {
		t.Errorf("trailing data: %v, want ErrTrailing", err)
	}
}
