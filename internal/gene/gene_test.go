package gene

import (
	"testing"

	"github.com/casebook-dev/casebook/shard"
)

func TestLayoutAndNames(t *testing.T) {
	for _, c := range []struct {
		dbs, perDB int
		ok         bool
	}{{8, 8, true}, {1, 1, true}, {4, 2, true}, {3, 8, false}, {8, 3, false}, {0, 8, false}, {8, 0, false}, {256, 512, false}} {
		if err := checkLayout(c.dbs, c.perDB); (err == nil) != c.ok {
			t.Errorf("%d × %d: %v", c.dbs, c.perDB, err)
		}
	}
	if got := Sibling(shard.Shard{Table: "orders_007"}, "payments"); got != "payments_007" {
		t.Errorf("Sibling = %q", got)
	}
	if got := Sibling(shard.Shard{Table: "rp_packets_0042"}, "rp_claims"); got != "rp_claims_0042" {
		t.Errorf("Sibling = %q", got)
	}
	for id, ok := range map[string]bool{"u1": true, "user:42{x}": true, "": false, "a b": false, "名字": false, string(make([]byte, 65)): false} {
		if err := ValidID(id); (err == nil) != ok {
			t.Errorf("ValidID(%q): %v", id, err)
		}
	}
}
