package idgen

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
)

// Sequence hands out distinct non-negative integers; *Segment is one.
type Sequence interface {
	Next(ctx context.Context) (int64, error)
}

// ShortCodeConfig configures ShortCodes.
type ShortCodeConfig struct {
	// Length of every code, 1..10. Default 7: 62^7 ≈ 3.5e12 codes, 9,000
	// years of 1M links a day. 6 holds 5.7e10, about 150 years of it.
	Length int
	// Key selects the permutation. Required, and not zero: a zero key would
	// be everybody's key, and anyone could list the codes in the order they
	// are issued. Draw it at random, keep it secret and fixed: changing it
	// changes the code of every counter, so decoding old codes breaks.
	Key uint64
}

var (
	// ErrShortCodeConfig is wrapped by configuration errors.
	ErrShortCodeConfig = errors.New("idgen: bad short code config")
	// ErrCodeSpace is returned when a counter does not fit the code space
	// (62^Length values).
	ErrCodeSpace = errors.New("idgen: counter outside the short code space")
	// ErrShortCode is returned for a code of the wrong length or alphabet.
	ErrShortCode = errors.New("idgen: malformed short code")
)

// feistelRounds: four rounds of a balanced Feistel network with pseudo-random
// round functions give a pseudo-random permutation (Luby–Rackoff). It hides
// the order of counters; it is not encryption to rely on against a
// determined attacker who can collect many codes.
const feistelRounds = 4

// ShortCodes turns counters into fixed-length, non-sequential base62 codes
// and back: a keyed bijection on [0, 62^Length), so distinct counters always
// give distinct codes and a code decodes to its counter. It is immutable and
// safe for concurrent use.
//
// The permutation is a Feistel network over the smallest even bit width that
// holds 62^Length, restricted to [0, 62^Length) by cycle walking (apply again
// until the value falls inside), so every code of the length is usable — not
// just the largest power of two below 62^Length.
type ShortCodes struct {
	seq      Sequence
	length   int
	space    uint64 // 62^length
	halfBits uint
	halfMask uint64
	keys     [feistelRounds]uint64
}

// NewShortCodes returns a code generator drawing counters from seq (which
// may be nil when only Encode and Decode are used).
func NewShortCodes(seq Sequence, cfg ShortCodeConfig) (*ShortCodes, error) {
	if cfg.Length == 0 {
		cfg.Length = 7
	}
	if cfg.Length < 1 || cfg.Length > 10 {
		return nil, fmt.Errorf("%w: length %d outside 1..10", ErrShortCodeConfig, cfg.Length)
	}
	if cfg.Key == 0 {
		return nil, fmt.Errorf("%w: zero key", ErrShortCodeConfig)
	}
	space := uint64(1)
	for range cfg.Length {
		space *= 62
	}
	width := uint(bits.Len64(space - 1))
	width += width & 1
	s := &ShortCodes{seq: seq, length: cfg.Length, space: space, halfBits: width / 2, halfMask: 1<<(width/2) - 1}
	k := cfg.Key
	for i := range s.keys {
		k = splitmix64(k + uint64(i)) // distinct round keys from one key
		s.keys[i] = k
	}
	return s, nil
}

// Length returns the code length.
func (s *ShortCodes) Length() int { return s.length }

// Next takes the next counter from the sequence and returns its code.
func (s *ShortCodes) Next(ctx context.Context) (string, error) {
	n, err := s.seq.Next(ctx)
	if err != nil {
		return "", err
	}
	if n < 0 {
		return "", fmt.Errorf("%w: %d", ErrCodeSpace, n)
	}
	return s.Encode(uint64(n))
}

// Encode returns the code of counter.
func (s *ShortCodes) Encode(counter uint64) (string, error) {
	if counter >= s.space {
		return "", fmt.Errorf("%w: %d ≥ 62^%d", ErrCodeSpace, counter, s.length)
	}
	var buf [10]byte
	return string(AppendBase62(buf[:0], s.permute(counter), s.length)), nil
}

// Decode returns the counter whose code is code.
func (s *ShortCodes) Decode(code string) (uint64, error) {
	if len(code) != s.length {
		return 0, fmt.Errorf("%w: %q is not %d characters", ErrShortCode, code, s.length)
	}
	v, err := DecodeBase62(code)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrShortCode, err)
	}
	return s.unpermute(v), nil // v < 62^length holds for any code of this length
}

func (s *ShortCodes) permute(v uint64) uint64 {
	for {
		v = s.feistel(v)
		if v < s.space {
			return v
		}
	}
}

func (s *ShortCodes) unpermute(v uint64) uint64 {
	for {
		v = s.feistelInverse(v)
		if v < s.space {
			return v
		}
	}
}

func (s *ShortCodes) feistel(v uint64) uint64 {
	l, r := v>>s.halfBits, v&s.halfMask
	for _, k := range s.keys {
		l, r = r, l^(splitmix64(r^k)&s.halfMask)
	}
	return l<<s.halfBits | r
}

func (s *ShortCodes) feistelInverse(v uint64) uint64 {
	l, r := v>>s.halfBits, v&s.halfMask
	for i := len(s.keys) - 1; i >= 0; i-- {
		l, r = r^(splitmix64(l^s.keys[i])&s.halfMask), l
	}
	return l<<s.halfBits | r
}

// splitmix64 is the finaliser of SplitMix64: a fast, well-mixing bijection
// on 64 bits, used here as the Feistel round function.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
