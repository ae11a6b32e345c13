package redpacket_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/casebook-dev/casebook/redpacket"
)

// Every split sums exactly, no share is 0, each is within twice the mean of
// what remained when it was drawn — over random totals and counts, edge
// cases included (total = count, count = 1, the largest count).
func TestSplitInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cases := [][2]int64{{1, 1}, {2, 2}, {3, 2}, {500, 500}, {501, 500}, {1e10, 500}, {100, 1}, {7, 3}}
	for range 20000 {
		count := 1 + rng.Int64N(500)
		cases = append(cases, [2]int64{count + rng.Int64N(100_000), count})
	}
	for _, c := range cases {
		total, count := c[0], int(c[1])
		shares, err := redpacket.Split(redpacket.Random, total, count, rng.Int64N)
		if err != nil {
			t.Fatal(err)
		}
		left, sum := total, int64(0)
		for i, s := range shares {
			n := int64(count - i)
			if s < 1 || (i < count-1 && s > 2*left/n) {
				t.Fatalf("total %d count %d: share %d = %d with %d left for %d", total, count, i, s, left, n)
			}
			left -= s
			sum += s
		}
		if sum != total || len(shares) != count {
			t.Fatalf("total %d count %d: %d shares sum to %d", total, count, len(shares), sum)
		}
	}
	for _, bad := range [][2]int64{{0, 1}, {5, 6}, {-1, 1}, {10, 0}} {
		if _, err := redpacket.Split(redpacket.Random, bad[0], int(bad[1]), nil); !errors.Is(err, redpacket.ErrInvalid) {
			t.Errorf("Split(%d, %d): %v", bad[0], bad[1], err)
		}
	}
	if _, err := redpacket.Split(redpacket.Fixed, 10, 3, nil); !errors.Is(err, redpacket.ErrInvalid) {
		t.Error("fixed 10/3 accepted")
	}
	if s, _ := redpacket.Split(redpacket.Fixed, 12, 3, nil); s[0] != 4 || s[2] != 4 {
		t.Errorf("fixed 12/3 = %v", s)
	}
}

// The double mean's known shape, measured over 100k packets of ¥100 for 10:
// every grab position expects total/count (the method is fair in
// expectation), while the variance grows with the position.
func TestSplitMeanByPosition(t *testing.T) {
	const packets, total, count = 100_000, 10000, 10
	rng := rand.New(rand.NewPCG(7, 8))
	var sum, sumSq [count]float64
	for range packets {
		shares, _ := redpacket.Split(redpacket.Random, total, count, rng.Int64N)
		for i, s := range shares {
			sum[i] += float64(s)
			sumSq[i] += float64(s) * float64(s)
		}
	}
	mean := float64(total) / count
	for i := range count {
		m := sum[i] / packets
		sd := math.Sqrt(sumSq[i]/packets - m*m)
		// 5 standard errors: a false alarm about once in 3.5 million runs.
		if se := sd / math.Sqrt(packets); math.Abs(m-mean) > 5*se {
			t.Errorf("position %d: mean %.2f fen, want %.0f ± %.2f", i+1, m, mean, 5*se)
		}
		t.Logf("position %2d: mean %7.2f fen, sd %6.2f", i+1, m, sd)
	}
}
