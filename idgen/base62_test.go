package idgen

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestBase62Known(t *testing.T) {
	cases := []struct {
		n uint64
		s string
	}{
		{0, "0"}, {9, "9"}, {10, "A"}, {35, "Z"}, {36, "a"}, {61, "z"}, {62, "10"},
		{3843, "zz"}, {3844, "100"}, {math.MaxUint64, "LygHa16AHYF"},
	}
	for _, c := range cases {
		if got := EncodeBase62(c.n); got != c.s {
			t.Errorf("EncodeBase62(%d) = %q, want %q", c.n, got, c.s)
		}
		if got, err := DecodeBase62(c.s); err != nil || got != c.n {
			t.Errorf("DecodeBase62(%q) = %d, %v; want %d", c.s, got, err, c.n)
		}
	}
	if got := string(AppendBase62([]byte("x"), 62, 7)); got != "x0000010" {
		t.Errorf("padded = %q", got)
	}
	if got, _ := DecodeBase62("0000010"); got != 62 {
		t.Errorf("leading zeros: got %d", got)
	}
}

func TestBase62Rejects(t *testing.T) {
	for _, s := range []string{"", "abc-", " 1", "1 ", "é", "LygHa16AHYG", "zzzzzzzzzzzz", "100000000000", "+1"} {
		if n, err := DecodeBase62(s); !errors.Is(err, ErrBase62) {
			t.Errorf("DecodeBase62(%q) = %d, %v; want ErrBase62", s, n, err)
		}
	}
}

// Base62 codes of equal length sort like their numbers.
func TestBase62PaddedOrder(t *testing.T) {
	prev := ""
	for n := uint64(0); n < 20000; n += 7 {
		s := string(AppendBase62(nil, n, 5))
		if strings.Compare(prev, s) >= 0 {
			t.Fatalf("%q (for %d) does not sort after %q", s, n, prev)
		}
		prev = s
	}
}

func FuzzBase62RoundTrip(f *testing.F) {
	f.Add(uint64(0))
	f.Add(uint64(math.MaxUint64))
	f.Add(uint64(3844))
	f.Fuzz(func(t *testing.T, n uint64) {
		s := EncodeBase62(n)
		got, err := DecodeBase62(s)
		if err != nil || got != n {
			t.Fatalf("round trip %d → %q → %d, %v", n, s, got, err)
		}
	})
}

func FuzzDecodeBase62(f *testing.F) {
	for _, s := range []string{"", "0", "zz", "LygHa16AHYF", "LygHa16AHYG", "\xff", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := DecodeBase62(s) // must never panic
		if err != nil {
			return
		}
		// Every accepted string is the canonical encoding up to leading zeros.
		if want := strings.TrimLeft(s, "0"); want != "" && EncodeBase62(n) != want {
			t.Fatalf("%q decoded to %d which encodes as %q", s, n, EncodeBase62(n))
		}
	})
}
