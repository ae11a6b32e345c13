package hotlist

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// Every key one script call touches — a flush with slots and like sets, a
// read of the live slots — shares its partition's hash slot; partitions
// spread over different slots.
func TestScriptKeysShareTheirPartitionSlot(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	now := testenv.Now().UTC().Truncate(time.Hour)
	for _, model := range []Model{Decay, Window} {
		l, err := New(c, Config{Name: "n{a}me", Namespace: "ns{x}", Partitions: 64, Model: model, DedupLikes: true, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		a, _ := NewAggregator(l, AggregatorConfig{})
		slots := map[int]bool{}
		for p := range 64 {
			claim := &Claim{a: a, l: l, p: p, applied: -1, pend: newBatch()}
			b := claim.pend
			b.from, b.to = 0, 0
			for i, ms := range []int64{now.UnixMilli(), now.UnixMilli() - 6*60_000, now.UnixMilli() - 25*60*60_000} {
				slot := l.slotOf(ms)
				b.add(slot, []byte("item"), 1)
				b.addLike(nil, floorDiv(ms, l.dedupMs), slot, []byte("item"), []byte{byte('u' + i)}, 1)
			}
			flushKeys, _, _ := claim.flushCall(b, now, false, false)
			topKeys := l.topCall(p, now, 10, true).Keys
			want := keys.Slot(flushKeys[0])
			for _, k := range append(flushKeys, topKeys...) {
				if keys.Slot(k) != want {
					t.Fatalf("%v partition %d: %s is in slot %d, %s in %d", model, p, k, keys.Slot(k), flushKeys[0], want)
				}
			}
			if len(flushKeys) < 3 || model == Window && len(flushKeys) < 3+3+2 {
				t.Fatalf("%v: flush keys %v", model, flushKeys)
			}
			slots[want] = true
		}
		if len(slots) < 60 {
			t.Fatalf("64 partitions share %d slots", len(slots))
		}
	}
}
