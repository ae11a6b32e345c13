package idgen

import (
	"errors"
	"testing"
)

// Exhaustive: on small code spaces every counter maps to a distinct code of
// the right length, and every code decodes to its counter.
func TestShortCodesBijection(t *testing.T) {
	for _, length := range []int{1, 2, 3} {
		s, err := NewShortCodes(nil, ShortCodeConfig{Length: length, Key: 42})
		if err != nil {
			t.Fatal(err)
		}
		seen := make(map[string]bool, int(s.space))
		for n := range s.space {
			code, err := s.Encode(n)
			if err != nil {
				t.Fatal(err)
			}
			if len(code) != length || seen[code] {
				t.Fatalf("length %d: counter %d gave %q (duplicate=%v)", length, n, code, seen[code])
			}
			seen[code] = true
			if back, err := s.Decode(code); err != nil || back != n {
				t.Fatalf("Decode(%q) = %d, %v; want %d", code, back, err, n)
			}
		}
		if uint64(len(seen)) != s.space {
			t.Fatalf("length %d: %d codes for %d counters", length, len(seen), s.space)
		}
	}
}

func TestShortCodesRoundTripFullLength(t *testing.T) {
	s, _ := NewShortCodes(nil, ShortCodeConfig{Key: 7})
	for _, n := range []uint64{0, 1, 2, 1e6, 1e9, s.space - 1} {
		code, err := s.Encode(n)
		if err != nil || len(code) != 7 {
			t.Fatalf("Encode(%d) = %q, %v", n, code, err)
		}
		if back, err := s.Decode(code); back != n || err != nil {
			t.Fatalf("Decode(Encode(%d)) = %d, %v", n, back, err)
		}
	}
}

// Consecutive counters must not give visibly consecutive codes: about half of
// the adjacent pairs should be in increasing order, and no code should share
// its first five characters with the next counter's.
func TestShortCodesLookRandom(t *testing.T) {
	s, _ := NewShortCodes(nil, ShortCodeConfig{Key: 99})
	increasing, samePrefix := 0, 0
	prev, _ := s.Encode(1000)
	for n := uint64(1001); n < 11000; n++ {
		code, _ := s.Encode(n)
		if code > prev {
			increasing++
		}
		if code[:5] == prev[:5] {
			samePrefix++
		}
		prev = code
	}
	if increasing < 4500 || increasing > 5500 {
		t.Errorf("%d of 9999 adjacent pairs increase; want about half", increasing)
	}
	if samePrefix > 5 {
		t.Errorf("%d adjacent codes share a 5-character prefix", samePrefix)
	}
}

func TestShortCodesKeyMatters(t *testing.T) {
	a, _ := NewShortCodes(nil, ShortCodeConfig{Key: 1})
	b, _ := NewShortCodes(nil, ShortCodeConfig{Key: 2})
	same := 0
	for n := range uint64(1000) {
		ca, _ := a.Encode(n)
		cb, _ := b.Encode(n)
		if ca == cb {
			same++
		}
	}
	if same > 1 {
		t.Fatalf("%d of 1000 counters got the same code under two keys", same)
	}
}

func TestShortCodesErrors(t *testing.T) {
	s, _ := NewShortCodes(nil, ShortCodeConfig{Length: 6, Key: 3})
	if _, err := s.Encode(s.space); !errors.Is(err, ErrCodeSpace) {
		t.Errorf("Encode(62^6) error = %v, want ErrCodeSpace", err)
	}
	for _, bad := range []string{"", "abc", "abcdefg", "abc-ef", "abc de"} {
		if _, err := s.Decode(bad); !errors.Is(err, ErrShortCode) {
			t.Errorf("Decode(%q) error = %v, want ErrShortCode", bad, err)
		}
	}
	for _, cfg := range []ShortCodeConfig{{Length: -1, Key: 3}, {Length: 11, Key: 3}, {Length: 7}} {
		if _, err := NewShortCodes(nil, cfg); !errors.Is(err, ErrShortCodeConfig) {
			t.Errorf("%+v: %v, want ErrShortCodeConfig", cfg, err)
		}
	}
}
