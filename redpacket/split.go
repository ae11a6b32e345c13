package redpacket

import (
	"fmt"
	"math/rand/v2"
)

// Kind is how a packet's total is shared.
type Kind string

const (
	// Random shares by the double-mean method: each share is at least one
	// fen and at most twice the mean of what remains when it is drawn; the
	// last share takes the remainder.
	Random Kind = "random"
	// Fixed shares are all equal; the total must divide by the count.
	Fixed Kind = "fixed"
)

// Split divides total fen into count shares of kind, drawing random numbers
// from intn (intn(n) returns a uniform value in [0, n); nil: math/rand/v2).
// The shares sum to total exactly, each is ≥ 1, and a Random share drawn
// when R fen remain for n shares is uniform in [1, 2R/n − 1] — so it
// expects R/n, the mean — and leaves ≥ 1 fen for each share after it.
func Split(kind Kind, total int64, count int, intn func(int64) int64) ([]int64, error) {
	if count < 1 || total < int64(count) {
		return nil, fmt.Errorf("%w: %d fen cannot make %d shares of at least 1 fen", ErrInvalid, total, count)
	}
	if intn == nil {
		intn = rand.Int64N
	}
	shares := make([]int64, count)
	switch kind {
	case Fixed:
		if total%int64(count) != 0 {
			return nil, fmt.Errorf("%w: %d fen do not divide into %d equal shares", ErrInvalid, total, count)
		}
		for i := range shares {
			shares[i] = total / int64(count)
		}
	case Random:
		left := total
		for i := range count - 1 {
			n := int64(count - i)
			// Below twice the mean of what is left, and leaving a fen for
			// each share still to come. left ≥ n, so upper ≥ 1.
			upper := min(2*left/n-1, left-(n-1))
			share := 1 + intn(upper) // 1..upper; upper ≥ 1, so intn never gets 0
			shares[i] = share
			left -= share
		}
		shares[count-1] = left
	default:
		return nil, fmt.Errorf("%w: kind %q", ErrInvalid, kind)
	}
	return shares, nil
}
