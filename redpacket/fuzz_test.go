package redpacket_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/casebook-dev/casebook/outbox"
	"github.com/casebook-dev/casebook/redpacket"
)

// Claim messages from Kafka: never a panic; a rejected one is poison; an
// accepted one round-trips.
func FuzzDecodeClaim(f *testing.F) {
	f.Add([]byte(`{"v":1,"packet":42,"user":"ann","amount":300,"index":1,"at":1}`))
	f.Add([]byte(`{"v":1,"packet":42,"user":"a b","amount":300,"index":1,"at":1}`))
	f.Add([]byte(`{"v":2,"packet":42,"at":1,"claims":[{"user":"ann","amount":300,"index":1},{"user":"b\"o\\b","amount":5,"index":2}]}`))
	f.Add([]byte(`{"v":2,"packet":42,"at":1,"claims":[{"user":"ann","amount":300,"index":1},{"user":"ann","amount":5,"index":2}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, value []byte) {
		m, err := redpacket.DecodeClaim(value)
		if err != nil {
			if !errors.Is(err, outbox.ErrPoison) || !errors.Is(err, redpacket.ErrBadMessage) {
				t.Fatalf("rejection not poison: %v", err)
			}
			return
		}
		b, _ := json.Marshal(m)
		if back, err := redpacket.DecodeClaim(b); err != nil || !reflect.DeepEqual(back, m) {
			t.Fatalf("%+v does not round-trip: %+v %v", m, back, err)
		}
	})
}

// Split never panics and keeps its invariants for any input it accepts.
func FuzzSplit(f *testing.F) {
	f.Add(int64(100), 10, uint64(1))
	f.Add(int64(5), 5, uint64(2))
	f.Fuzz(func(t *testing.T, total int64, count int, seed uint64) {
		if count > 1000 {
			count %= 1000
		}
		draws := seed
		intn := func(n int64) int64 { // deterministic, any value in [0, n)
			draws = draws*6364136223846793005 + 1442695040888963407
			return int64(draws>>1) % n
		}
		shares, err := redpacket.Split(redpacket.Random, total, count, intn)
		if err != nil {
			return
		}
		var sum int64
		for _, s := range shares {
			if s < 1 {
				t.Fatalf("Split(%d, %d): share %d", total, count, s)
			}
			sum += s
		}
		if sum != total {
			t.Fatalf("Split(%d, %d) sums to %d", total, count, sum)
		}
	})
}
