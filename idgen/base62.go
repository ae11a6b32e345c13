package idgen

import (
	"errors"
	"fmt"
	"math"
)

// Base62Alphabet is the digit order of base62 here: 0-9, A-Z, a-z, so codes
// sort the same way as the numbers they encode when padded to one length.
const Base62Alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// ErrBase62 is wrapped by every base62 decoding error.
var ErrBase62 = errors.New("idgen: invalid base62")

// base62Value maps a byte to its digit value, or 0xFF for a non-digit.
var base62Value = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xFF
	}
	for i := 0; i < len(Base62Alphabet); i++ {
		t[Base62Alphabet[i]] = byte(i)
	}
	return t
}()

// maxBase62Len is the length of math.MaxUint64 in base62 ("LygHa16AHYF").
const maxBase62Len = 11

// EncodeBase62 returns n in base62 without padding ("0" for 0).
func EncodeBase62(n uint64) string {
	var buf [maxBase62Len]byte
	return string(appendBase62(buf[:0], n, 0))
}

// AppendBase62 appends n in base62, left-padded with '0' to at least width
// digits, to dst.
func AppendBase62(dst []byte, n uint64, width int) []byte {
	return appendBase62(dst, n, width)
}

func appendBase62(dst []byte, n uint64, width int) []byte {
	var buf [maxBase62Len]byte
	i := len(buf)
	for {
		i--
		buf[i] = Base62Alphabet[n%62]
		n /= 62
		if n == 0 {
			break
		}
	}
	for pad := width - (len(buf) - i); pad > 0; pad-- {
		dst = append(dst, '0')
	}
	return append(dst, buf[i:]...)
}

// DecodeBase62 parses s as a base62 number. It rejects the empty string,
// characters outside the alphabet and values above math.MaxUint64. Leading
// zeros are accepted, so padded codes decode.
func DecodeBase62(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty string", ErrBase62)
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d := base62Value[s[i]]
		if d == 0xFF {
			return 0, fmt.Errorf("%w: character %q at %d", ErrBase62, s[i], i)
		}
		if n > (math.MaxUint64-uint64(d))/62 {
			return 0, fmt.Errorf("%w: %q overflows 64 bits", ErrBase62, s)
		}
		n = n*62 + uint64(d)
	}
	return n, nil
}
