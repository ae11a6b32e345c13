package keys_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestKeyShape(t *testing.T) {
	cases := []struct {
		space, tag string
		parts      []string
		want       string
	}{
		{"shop:seckill", "c1", []string{"stock"}, "shop:seckill:{c1}:stock"},
		{"", "c1", nil, "{c1}"},
		{"ns", "a}b{c", []string{"x}"}, "ns:{a%7Db%7Bc}:x%7D"},
		{"ns", "100%", nil, "ns:{100%25}"},
	}
	for _, c := range cases {
		if got := keys.NewSpace(c.space).Key(c.tag, c.parts...); got != c.want {
			t.Errorf("Key(%q, %q, %q) = %q, want %q", c.space, c.tag, c.parts, got, c.want)
		}
	}
}

// Escaping must keep distinct ids distinct, or two entities would share keys.
func TestKeyEscapingIsInjective(t *testing.T) {
	s := keys.NewSpace("ns")
	seen := map[string]string{}
	for _, tag := range []string{"a}", "a%7D", "a%257D", "{a", "%7Ba", "a", "a%"} {
		k := s.Key(tag)
		if prev, dup := seen[k]; dup {
			t.Fatalf("tags %q and %q both give key %q", prev, tag, k)
		}
		seen[k] = tag
		if got := keys.Unescape(k[len("ns:{") : len(k)-1]); got != tag {
			t.Fatalf("Unescape gives %q back for %q", got, tag)
		}
	}
}

func TestSlotKnownValues(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	cases := map[string]int{
		"123456789":            12739, // the CRC16 check value 0x31C3
		"foo":                  12182,
		"{user1000}.following": keys.Slot("user1000"),
		"foo{}{bar}":           keys.Slot("foo{}{bar}"),
	}
	for key, want := range cases {
		if got := keys.Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if keys.Slot("foo{}{bar}") == keys.Slot("bar") {
		t.Error(`"foo{}{bar}" must hash the whole key: an empty first tag is no tag`)
	}
	if keys.Slot("foo{{bar}}zap") != keys.Slot("{bar") {
		t.Error(`"foo{{bar}}zap" must hash "{bar"`)
	}
}

// TestSlotMatchesCluster checks our CRC16 against the server's own
// CLUSTER KEYSLOT for many keys, including built ones.
func TestSlotMatchesCluster(t *testing.T) {
	r := testenv.NewRedisCluster(t)
	ctx := context.Background()
	s := keys.NewSpace(r.Namespace)
	var ks []string
	for i := range 500 {
		ks = append(ks, fmt.Sprintf("k%d", i), s.Key(fmt.Sprint(i), "stock"), s.Key("x}"+fmt.Sprint(i)), fmt.Sprintf("a{%d}{b}", i), "{}"+fmt.Sprint(i))
	}
	cc := r.Client.(*redis.ClusterClient)
	for _, k := range ks {
		want, err := cc.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keys.Slot(k); int64(got) != want {
			t.Fatalf("Slot(%q) = %d, server says %d", k, got, want)
		}
	}
}

// TestClusterIsReal proves the harness cluster enforces slots: a two-key script
// runs when both keys share a tag and fails with CROSSSLOT otherwise.
func TestClusterIsReal(t *testing.T) {
	r := testenv.NewRedisCluster(t)
	ctx := context.Background()
	s := keys.NewSpace(r.Namespace)
	script := redis.NewScript(`redis.call('SET', KEYS[1], ARGV[1]) redis.call('SET', KEYS[2], ARGV[1]) return 1`)

	same := []string{s.Key("u1", "a"), s.Key("u1", "b")}
	if keys.Slot(same[0]) != keys.Slot(same[1]) {
		t.Fatal("keys with one tag must share a slot")
	}
	if err := script.Run(ctx, r.Client, same, "v").Err(); err != nil {
		t.Fatalf("same-tag script: %v", err)
	}

	var apart []string
	for i := 0; len(apart) < 2; i++ { // two untagged keys on different slots
		k := fmt.Sprintf("%s:plain:%d", r.Namespace, i)
		if len(apart) == 0 || keys.Slot(k) != keys.Slot(apart[0]) {
			apart = append(apart, k)
		}
	}
	err := script.Run(ctx, r.Client, apart, "v").Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("cross-slot script error = %v, want CROSSSLOT", err)
	}
	if errors.Is(err, redis.Nil) {
		t.Fatal("unexpected nil")
	}
}

func TestJoin(t *testing.T) {
	for _, c := range []struct {
		parts []string
		want  string
	}{{[]string{"app", "rank"}, "app:rank"}, {[]string{"", "rank"}, "rank"}, {[]string{"a", "", "b"}, "a:b"}, {nil, ""}} {
		if got := keys.Join(c.parts...); got != c.want {
			t.Errorf("Join(%q) = %q, want %q", c.parts, got, c.want)
		}
	}
}

// TestPatternMatchesOnlyItsNamespace: SCAN with a namespace full of glob
// characters finds that namespace's keys and no one else's.
func TestPatternMatchesOnlyItsNamespace(t *testing.T) {
	r := testenv.NewRedis(t)
	ctx := context.Background()
	odd := keys.NewSpace(r.Namespace + `:a[b]*c?d\e`)
	other := keys.NewSpace(r.Namespace + `:aXbYc_d\e`)
	for _, k := range []string{odd.Key("t", "x"), other.Key("t", "x")} {
		if err := r.Client.Set(ctx, k, 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.Client.Keys(ctx, odd.Pattern()+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != odd.Key("t", "x") {
		t.Fatalf("pattern %q matched %q, want only %q", odd.Pattern()+"*", got, odd.Key("t", "x"))
	}
}

// TestEachPrimary: a scan through EachPrimary finds every key of a cluster
// (spread over every master) and of one server, and an unknown client type
// is an error, not a silent empty visit.
func TestEachPrimary(t *testing.T) {
	ctx := context.Background()
	for name, r := range map[string]*testenv.Redis{"single": testenv.NewRedis(t), "cluster": testenv.NewRedisCluster(t)} {
		t.Run(name, func(t *testing.T) {
			s := keys.NewSpace(r.Namespace)
			want := map[string]bool{}
			for i := range 200 {
				k := s.Key(fmt.Sprint(i), "v")
				want[k] = true
				if err := r.Client.Set(ctx, k, i, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			got, nodes := map[string]bool{}, 0
			err := keys.EachPrimary(ctx, r.Client, func(ctx context.Context, node *redis.Client) error {
				found, err := testenv.ScanKeys(ctx, node, s.Pattern()+"*")
				mu.Lock()
				defer mu.Unlock()
				nodes++
				for _, k := range found {
					if got[k] {
						t.Errorf("key %s seen on two primaries", k)
					}
					got[k] = true
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("found %d keys on %d primaries, want %d", len(got), nodes, len(want))
			}
			if _, ok := r.Client.(*redis.ClusterClient); ok && nodes < 2 {
				t.Fatalf("visited %d primaries of a cluster", nodes)
			}
		})
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	called := false
	if err := keys.EachPrimary(ctx, ring, func(context.Context, *redis.Client) error { called = true; return nil }); err == nil || called {
		t.Fatalf("a ring: err %v, called %v; want an error and no call", err, called)
	}
}
