package seckill

import (
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// Every key a script of one bucket takes hashes to that bucket's slot, so
// the scripts run on Redis Cluster; the buckets of a campaign spread over
// slots.
func TestBucketKeysShareASlot(t *testing.T) {
	s := &Service{space: keys.NewSpace("shop{eu}:seckill"), cfg: Config{RetryWindow: time.Second, Now: testenv.Now}}
	sl := &Sale{s: s, c: Campaign{ID: "c1:double-11", Buckets: 8}}
	slots := map[int]bool{}
	for b := range sl.c.Buckets {
		want := keys.Slot(sl.key(b, "stock"))
		all := append(sl.bucketKeys(b, "quota", "res", "due", "outbox", "version", "fence"), sl.recent(b))
		for _, k := range all {
			if got := keys.Slot(k); got != want {
				t.Errorf("bucket %d: %s in slot %d, stock in %d", b, k, got, want)
			}
		}
		slots[want] = true
	}
	if len(slots) < 2 {
		t.Errorf("8 buckets in %d slot(s)", len(slots))
	}
}
