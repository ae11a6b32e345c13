package notify_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/feed/notify"
	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/outbox"
)

func TestConfig(t *testing.T) {
	r := testenv.NewRedis(t)
	for _, c := range []notify.Config{
		{Window: time.Millisecond}, {Window: time.Second + time.Microsecond}, {Window: 400 * 24 * time.Hour},
		{Cap: -1}, {Cap: notify.MaxCap + 1}, {MaxActors: -1}, {MaxActors: 101},
		{Window: time.Hour, DedupeTTL: time.Minute},
	} {
		if _, err := notify.New(r.Client, c); !errors.Is(err, notify.ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", c, err)
		}
	}
	if _, err := notify.New(nil, notify.Config{}); !errors.Is(err, notify.ErrConfig) {
		t.Errorf("a nil client: %v", err)
	}
	if _, err := notify.New(r.Client, notify.Config{}); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

// TestKeysShareASlot: every key of one activity's script (and of the
// reads, a subset) is in one cluster slot, whatever the user id holds.
func TestKeysShareASlot(t *testing.T) {
	f, err := notify.New(testenv.NewRedis(t).Client, notify.Config{Namespace: "ns{x}"})
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"alice", "{bob}", "a}b{c", "x:y"} {
		ks := f.AllKeys(notify.Activity{ID: "i{d}", Actor: "a", Verb: "like", Object: "o{1}", Target: user, Time: testenv.Now()})
		for _, k := range ks[1:] {
			if keys.Slot(k) != keys.Slot(ks[0]) {
				t.Errorf("%s in slot %d, %s in %d", k, keys.Slot(k), ks[0], keys.Slot(ks[0]))
			}
		}
	}
}

// TestBadInput: every refusal is ErrInvalid or ErrCursor and changes
// nothing.
func TestBadInput(t *testing.T) {
	x := newFixture(t, testenv.NewRedis(t), notify.Config{})
	now := x.clk.Now()
	good := notify.Activity{ID: "1", Actor: "bob", Verb: "like", Object: "post:1", Target: "alice", Time: now}
	if err := x.f.Add(x.ctx, good); err != nil {
		t.Fatal(err)
	}
	if _, err := x.f.MarkSeen(x.ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	before := x.all("alice", 10)
	bad := func(mod func(*notify.Activity)) notify.Activity { a := good; a.ID = "2"; mod(&a); return a }
	for _, a := range []notify.Activity{
		bad(func(a *notify.Activity) { a.ID = "" }),
		bad(func(a *notify.Activity) { a.Actor = "" }),
		bad(func(a *notify.Activity) { a.Target = "" }),
		bad(func(a *notify.Activity) { a.Object = strings.Repeat("o", 65) }),
		bad(func(a *notify.Activity) { a.Actor = "b ob" }),
		bad(func(a *notify.Activity) { a.Verb = "" }),
		bad(func(a *notify.Activity) { a.Verb = "Like" }),
		bad(func(a *notify.Activity) { a.Verb = "li:ke" }),
		bad(func(a *notify.Activity) { a.Verb = "1like" }),
		bad(func(a *notify.Activity) { a.Time = time.Time{} }),
		bad(func(a *notify.Activity) { a.Time = now.Add(notify.MaxSkew + time.Millisecond) }),
		bad(func(a *notify.Activity) { a.Time = now.Add(-48*time.Hour - time.Millisecond) }), // DedupeTTL: 2 × 24h
	} {
		if err := x.f.Add(x.ctx, a); !errors.Is(err, notify.ErrInvalid) {
			t.Errorf("Add(%+v) = %v, want ErrInvalid", a, err)
		}
	}
	for _, n := range []int{0, -1, notify.MaxPage + 1} {
		if _, err := x.f.Groups(x.ctx, "alice", "", n); !errors.Is(err, notify.ErrInvalid) {
			t.Errorf("a page of %d: %v", n, err)
		}
	}
	for _, c := range []string{"x", "AQAAAAAAAAAB\n", "AgAAAAAAAAAB", "AQAAAAAAAAAA", "AQAAAAAAAAABAA", "AQ__________"} {
		if _, err := x.f.Groups(x.ctx, "alice", c, 10); !errors.Is(err, notify.ErrCursor) {
			t.Errorf("cursor %q: %v", c, err)
		}
	}
	if _, err := x.f.Groups(x.ctx, "", "", 10); !errors.Is(err, notify.ErrInvalid) {
		t.Errorf("an empty user: %v", err)
	}
	if _, err := x.f.Counts(x.ctx, ""); !errors.Is(err, notify.ErrInvalid) {
		t.Errorf("counts of an empty user: %v", err)
	}
	gid := before[0].ID
	for _, ids := range [][]string{{gid, "like:post:1"}, {gid, ""}, {gid, "01:like:x"}, {gid, "1:Like:x"}, make([]string, notify.MaxMark+1)} {
		if _, err := x.f.MarkRead(x.ctx, "alice", ids...); !errors.Is(err, notify.ErrInvalid) {
			t.Errorf("MarkRead(%.3q) = %v, want ErrInvalid", ids, err)
		}
	}
	if _, err := x.f.MarkSeen(x.ctx, "", gid); !errors.Is(err, notify.ErrInvalid) {
		t.Errorf("MarkSeen of an empty user: %v", err)
	}
	sameGroups(t, "after the refusals", x.all("alice", 10), before)
	if c := x.counts("alice"); c != (notify.Counts{Unseen: 0, Unread: 1}) {
		t.Errorf("counts %+v, want 0 unseen, 1 unread", c)
	}
}

// TestWire: Encode and Decode round-trip, and what Decode refuses is
// poison.
func TestWire(t *testing.T) {
	a := notify.Activity{ID: "like-9", Actor: "bob", Verb: "like", Object: "post:42", Target: "alice", Time: time.UnixMilli(1764480000000).UTC()}
	v, err := notify.Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"v":1,"id":"like-9","actor":"bob","verb":"like","object":"post:42","target":"alice","time_ms":1764480000000}`; string(v) != want {
		t.Fatalf("encoded %s, want %s", v, want)
	}
	if got, err := notify.Decode(v); err != nil || got != a {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, a)
	}
	if _, err := notify.Encode(notify.Activity{}); !errors.Is(err, notify.ErrInvalid) {
		t.Fatalf("encoding nothing: %v", err)
	}
	for _, p := range poison {
		if _, err := notify.Decode([]byte(p)); !errors.Is(err, notify.ErrBadMessage) || !errors.Is(err, outbox.ErrPoison) {
			t.Errorf("Decode(%s) = %v, want poison ErrBadMessage", p, err)
		}
	}
}

// poison are messages Decode refuses.
var poison = []string{
	`not json`,
	`null`,
	`{}`,
	`{"v":2,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":1764480000000}`,
	`{"v":1,"id":"","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":1764480000000}`,
	`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"","time_ms":1764480000000}`,
	`{"v":1,"id":"p","actor":"bob","verb":"LIKE","object":"o","target":"alice","time_ms":1764480000000}`,
	`{"v":1,"id":"p","actor":"bob","verb":"li ke","object":"o","target":"alice","time_ms":1764480000000}`,
	`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":-5}`,
	`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":253402300800000}`,
	`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice"}`,
	`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":1764480000000,"x":1}`,
	`{"v":1,"id":"p","id":"q","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":1764480000000}`,
	`{"v":1,"ID":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":1764480000000}`,
	`{"v":1,"id":"p","actor":"bob","verb":"like","object":"o","target":"alice","time_ms":1764480000000} {}`,
}

// TestLowerCap: a Feed with a lower Cap on the same keys trims a user's
// feed to it at the next new group, dropping the least recently updated
// groups, each with its actor set.
func TestLowerCap(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		x := newFixture(t, r, notify.Config{Cap: 5})
		add := func(f *notify.Feed, i int) notify.Activity {
			a := notify.Activity{ID: fmt.Sprint("c", i), Actor: "bob", Verb: "like", Object: fmt.Sprint("post:", i), Target: "erin", Time: x.clk.Now()}
			if err := f.Add(x.ctx, a); err != nil {
				t.Fatal(err)
			}
			return a
		}
		var added []notify.Activity
		for i := range 5 {
			added = append(added, add(x.f, i))
		}
		cfg := x.cfg
		cfg.Cap = 2
		lower, err := notify.New(r.Client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		add(lower, 5)
		gs := x.all("erin", 10)
		if len(gs) != 2 || gs[0].Object != "post:5" || gs[1].Object != "post:4" {
			t.Fatalf("groups %+v, want post:5 and post:4", gs)
		}
		for _, a := range added[:4] {
			k := x.f.AllKeys(a)
			if n, err := r.Client.Exists(x.ctx, k[len(k)-1]).Result(); err != nil || n != 0 {
				t.Errorf("the actor set of dropped group %s: %d, %v", x.f.GroupID(a), n, err)
			}
		}
		if c := x.counts("erin"); c != (notify.Counts{Unseen: 2, Unread: 2}) {
			t.Errorf("counts %+v, want 2 and 2", c)
		}
	})
}
