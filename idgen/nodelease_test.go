package idgen_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func sqlNodeStore(t *testing.T) *idgen.SQLNodeStore {
	t.Helper()
	s, err := idgen.NewSQLNodeStore(testenv.NewSQL(t), "node_leases")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func nodeStores() map[string]func(t *testing.T) idgen.NodeStore {
	return map[string]func(t *testing.T) idgen.NodeStore{
		"redis": func(t *testing.T) idgen.NodeStore {
			r := testenv.NewRedis(t)
			return idgen.NewRedisNodeStore(r.Client, r.Namespace)
		},
		"sql": func(t *testing.T) idgen.NodeStore { return sqlNodeStore(t) },
	}
}

// countingStore counts calls and can fail renewals or delay them.
type countingStore struct {
	idgen.NodeStore
	grants, renews, releases atomic.Int64
	failRenew                atomic.Bool
	slowRenew                func() time.Duration // a delay before some renewals
}

func (s *countingStore) Grant(ctx context.Context, pool string, first, last int64, holder string, ttl, margin time.Duration) (idgen.NodeGrant, error) {
	s.grants.Add(1)
	return s.NodeStore.Grant(ctx, pool, first, last, holder, ttl, margin)
}

func (s *countingStore) Renew(ctx context.Context, pool string, g idgen.NodeGrant, holder string, ttl time.Duration) error {
	s.renews.Add(1)
	if s.failRenew.Load() {
		return errors.New("injected renewal failure")
	}
	if s.slowRenew != nil {
		if d := s.slowRenew(); d > 0 {
			time.Sleep(d)
		}
	}
	return s.NodeStore.Renew(ctx, pool, g, holder, ttl)
}

func (s *countingStore) Release(ctx context.Context, pool string, g idgen.NodeGrant, holder string) error {
	s.releases.Add(1)
	return s.NodeStore.Release(ctx, pool, g, holder)
}

// tenure is one holder's time with a node id: [start, end) bounds every
// instant at which its lease was valid.
type tenure struct {
	id, token  int64
	start, end time.Time
	ids        []int64
}

// 50 goroutines race for 32 node ids for a few seconds, each holding a
// lease for a random while and issuing snowflake ids through it, while the
// store's replies are delayed past the TTL now and then so that leases are
// lost and their ids granted again. No two tenures of one id overlap, the
// later of two has the larger fencing token, and no snowflake id repeats.
func TestNodeLeaseNeverSharedUnderRace(t *testing.T) {
	const goroutines, nodes = 50, 32
	run := 4 * time.Second
	if testing.Short() {
		run = time.Second
	}
	// CASEBOOK_LEASE_RACE_IDS=10000000 keeps the race going past run until
	// that many snowflake ids were issued (and all of them are checked).
	var want int64
	if v := os.Getenv("CASEBOOK_LEASE_RACE_IDS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			t.Fatalf("CASEBOOK_LEASE_RACE_IDS=%q: want a count of ids", v)
		}
		want = n
	}
	cfg := idgen.NodeLeaseConfig{Pool: "race", First: 100, Count: nodes, TTL: 300 * time.Millisecond,
		RenewEvery: 100 * time.Millisecond, Margin: 150 * time.Millisecond, Now: testenv.Now}
	flap := func(p *testenv.Proxy) func(stop <-chan struct{}) {
		return func(stop <-chan struct{}) {
			p.Flap(stop, 300*time.Millisecond, 700*time.Millisecond, func() { p.Latency(400*time.Millisecond, 100*time.Millisecond) })
		}
	}
	backends := map[string]func(t *testing.T) (idgen.NodeStore, func(stop <-chan struct{})){
		"redis": func(t *testing.T) (idgen.NodeStore, func(stop <-chan struct{})) {
			r, p := testenv.NewFaultyRedis(t)
			return idgen.NewRedisNodeStore(r.Client, r.Namespace), flap(p)
		},
		"sql": func(t *testing.T) (idgen.NodeStore, func(stop <-chan struct{})) {
			if os.Getenv(testenv.EnvMySQLDSN) == "" && !testenv.RequireReal() {
				// SQLite has no connection to delay: delay a fifth of the renewals past the TTL.
				s := &countingStore{NodeStore: sqlNodeStore(t), slowRenew: func() time.Duration {
					if rand.N(5) == 0 {
						return 400 * time.Millisecond
					}
					return 0
				}}
				return s, func(<-chan struct{}) {}
			}
			f := testenv.NewFaultySQL(t, 1)
			s, err := idgen.NewSQLNodeStore(f.DBs[0], "node_leases")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.CreateTable(context.Background()); err != nil {
				t.Fatal(err)
			}
			return s, flap(f.Proxy)
		},
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			store, fault := open(t)
			ctx := context.Background()
			stop := make(chan struct{})
			var faults sync.WaitGroup
			faults.Go(func() { fault(stop) })
			var (
				mu      sync.Mutex
				tenures []tenure
				lost    atomic.Int64
				issued  atomic.Int64
				wg      sync.WaitGroup
			)
			begin := testenv.Now()
			for range goroutines {
				wg.Go(func() {
					for testenv.Since(begin) < run || issued.Load() < want {
						l, err := idgen.LeaseNode(ctx, store, cfg)
						if err != nil { // no free id, or the store is slow right now
							time.Sleep(5 * time.Millisecond)
							continue
						}
						tn := tenure{id: l.ID(), token: l.Token(), start: testenv.Now()}
						if s, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{Node: l}); err == nil {
							tn.ids = issueFor(t, s, time.Duration(50+rand.N(350))*time.Millisecond, &lost)
							issued.Add(int64(len(tn.ids)))
							s.Close()
						} else if !errors.Is(err, idgen.ErrLeaseLost) {
							t.Error(err)
						}
						l.Close()
						tn.end = testenv.Now()
						if d := l.Deadline(); d.Before(tn.end) {
							tn.end = d
						}
						mu.Lock()
						tenures = append(tenures, tn)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			close(stop)
			faults.Wait()
			checkTenures(t, tenures, nodes)
			if lost.Load() == 0 {
				t.Errorf("no lease was lost: the faults never delayed a renewal past the TTL")
			}
			t.Logf("%d tenures, %d lost leases", len(tenures), lost.Load())
		})
	}
}

// issueFor takes ids from s for d, or until its lease is lost.
func issueFor(t *testing.T, s *idgen.Snowflake, d time.Duration, lost *atomic.Int64) []int64 {
	ctx := context.Background()
	start := testenv.Now()
	ids := make([]int64, 0, 1<<14)
	for i := 0; i&1023 != 0 || testenv.Since(start) < d; i++ {
		id, err := s.Next(ctx)
		if errors.Is(err, idgen.ErrLeaseLost) {
			lost.Add(1)
			break
		}
		if err != nil {
			t.Error(err)
			break
		}
		ids = append(ids, id)
	}
	return ids
}

func checkTenures(t *testing.T, tenures []tenure, nodes int) {
	t.Helper()
	byID := map[int64][]tenure{}
	var all []int64
	for _, tn := range tenures {
		byID[tn.id] = append(byID[tn.id], tn)
		for _, id := range tn.ids {
			if idgen.SnowflakeNode(id) != tn.id {
				t.Fatalf("id %d carries node %d, leased %d", id, idgen.SnowflakeNode(id), tn.id)
			}
		}
		all = append(all, tn.ids...)
	}
	if len(byID) != nodes {
		t.Errorf("%d node ids were granted, want all %d", len(byID), nodes)
	}
	regranted := 0
	for id, ts := range byID {
		if id < 100 || id >= 100+int64(nodes) {
			t.Fatalf("node id %d outside the configured range", id)
		}
		slices.SortFunc(ts, func(a, b tenure) int { return a.start.Compare(b.start) })
		for i := 1; i < len(ts); i++ {
			a, b := ts[i-1], ts[i]
			if b.start.Before(a.end) && a.start.Before(a.end) && b.start.Before(b.end) {
				t.Errorf("node %d held twice at once: token %d over [%v, %v), token %d from %v",
					id, a.token, a.start.Format(time.StampMicro), a.end.Format(time.StampMicro), b.token, b.start.Format(time.StampMicro))
			}
			if b.token <= a.token {
				t.Errorf("node %d: token %d granted after token %d", id, b.token, a.token)
			}
		}
		regranted += len(ts) - 1
	}
	if regranted == 0 {
		t.Error("no node id was granted twice")
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("snowflake id %d issued twice", all[i])
		}
	}
	t.Logf("%d snowflake ids checked, %d node ids, %d grants of an id already used", len(all), len(byID), regranted)
}

// A lease whose renewals fail stops issuing ids when its TTL runs out,
// while the store still holds the id for it: no other process can have it
// yet. The renewal goroutine ends, and Close still releases the id.
func TestNodeLeaseStopsIssuingWhenRenewalsFail(t *testing.T) {
	for name, open := range nodeStores() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := &countingStore{NodeStore: open(t)}
			logs := obstest.NewLogs()
			cfg := idgen.NodeLeaseConfig{Pool: "p", Count: 1, TTL: 200 * time.Millisecond, RenewEvery: 50 * time.Millisecond, Margin: time.Second, Now: testenv.Now,
				Logger: logs.Logger}
			l, err := idgen.LeaseNode(ctx, store, cfg)
			if err != nil {
				t.Fatal(err)
			}
			s, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{Node: l})
			if err != nil {
				t.Fatal(err)
			}
			store.failRenew.Store(true)
			start := testenv.Now()
			for {
				if _, err := s.Next(ctx); err != nil {
					if !errors.Is(err, idgen.ErrLeaseLost) {
						t.Fatalf("Next: %v, want ErrLeaseLost", err)
					}
					break
				}
				if testenv.Since(start) > 5*time.Second {
					t.Fatal("still issuing 5 s after renewals began to fail")
				}
			}
			if testenv.Now().Before(l.Deadline()) {
				t.Fatalf("stopped before the deadline %v", l.Deadline())
			}
			if _, err := idgen.LeaseNode(ctx, store, cfg); !errors.Is(err, idgen.ErrNoFreeNode) {
				t.Fatalf("the store gave the id away as soon as the holder stopped: %v", err)
			}
			select {
			case <-l.Done():
			case <-time.After(time.Second):
				t.Fatal("Done not closed after the lease was lost")
			}
			// Each failed renewal at Warn, counted in a row, then the loss.
			lines := logs.Lines()
			prefix := fmt.Sprintf("casebook.block=idgen pool=p node=%d token=%d failed_renewals=", l.ID(), l.Token())
			for i, line := range lines[:len(lines)-1] {
				if want := fmt.Sprintf("WARN idgen: node lease renewal failed; retrying while the lease lasts %s%d lease_left=", prefix, i+1); !strings.HasPrefix(line, want) {
					t.Fatalf("line %d: %q, want it to begin %q", i, line, want)
				}
			}
			if want := fmt.Sprintf("ERROR idgen: node lease expired: every renewal failed; no more ids from it %s%d", prefix, len(lines)-1); len(lines) < 2 || lines[len(lines)-1] != want {
				t.Fatalf("logged %q, want failures then %q", lines, want)
			}
			renews := store.renews.Load()
			time.Sleep(150 * time.Millisecond)
			if n := store.renews.Load(); n != renews {
				t.Fatalf("renewals go on after the lease was lost: %d then %d", renews, n)
			}
			if err := l.Close(); err != nil || store.releases.Load() != 1 {
				t.Fatalf("close: %v, %d releases", err, store.releases.Load())
			}
		})
	}
}

// With the store out of reach (a black hole), the holder stops before the
// store's own clock reaches the lease's expiry.
func TestNodeLeaseStopsBeforeStoreExpiry(t *testing.T) {
	ctx := context.Background()
	r, p := testenv.NewFaultyRedis(t)
	r.NeedsServer(t, "TIME in scripts")
	direct := testenv.NewRedis(t).Client
	cfg := idgen.NodeLeaseConfig{Pool: "p", Count: 1, TTL: 300 * time.Millisecond, RenewEvery: 100 * time.Millisecond, Now: testenv.Now}
	l, err := idgen.LeaseNode(ctx, idgen.NewRedisNodeStore(r.Client, r.Namespace), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{Node: l})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // a renewal or two get through
	p.BlackHole()
	defer p.Heal()
	var before time.Time // the last id left before this instant
	for {
		before = testenv.Now()
		if _, err := s.Next(ctx); err != nil {
			if !errors.Is(err, idgen.ErrLeaseLost) {
				t.Fatal(err)
			}
			break
		}
	}
	asked := testenv.Now()
	now, err := direct.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	v, err := direct.HGet(ctx, keys.NewSpace(r.Namespace).Key("p", "nodes"), "0").Result()
	if err != nil {
		t.Fatal(err)
	}
	expires, _ := strconv.ParseInt(strings.Fields(v)[1], 10, 64)
	// The store's clock when the last id left was at most its reading now
	// minus the time that has passed since (on the test's clock).
	atLast := now.Add(-asked.Sub(before)).UnixMilli()
	if atLast >= expires {
		t.Fatalf("the holder issued ids up to %d ms past the store's expiry", atLast-expires)
	}
	t.Logf("the last id left ≥ %d ms before the store's expiry", expires-atLast)
}

// An id whose lease ended (released or expired) is granted again only once
// Margin has passed on the store's clock, with a larger token.
func TestNodeLeaseRecyclingWaitsForMargin(t *testing.T) {
	const margin = 400 * time.Millisecond
	for name, open := range nodeStores() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := open(t)
			cfg := idgen.NodeLeaseConfig{Pool: "p", First: 7, Count: 1, TTL: 200 * time.Millisecond, RenewEvery: 50 * time.Millisecond, Margin: margin, Now: testenv.Now}
			a, err := idgen.LeaseNode(ctx, store, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ended := testenv.Now()
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if err := a.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if a.Valid() {
				t.Fatal("valid after Close")
			}
			b := waitForLease(t, store, cfg)
			if waited := testenv.Since(ended); waited < margin-2*time.Millisecond {
				t.Fatalf("released id granted again after %v, margin %v", waited, margin)
			}
			if b.ID() != 7 || b.Token() <= a.Token() {
				t.Fatalf("second grant: id %d token %d after token %d", b.ID(), b.Token(), a.Token())
			}
			b.Close()
			// Expiry: a lease whose renewals fail is never released; its id
			// comes back TTL + Margin after it was granted.
			failing := &countingStore{NodeStore: store}
			failing.failRenew.Store(true)
			// After b's margin the id is free again — by the store's clock
			// (the SQL store's is the database's, in whole milliseconds),
			// which this sleep only approximates, so a grant asked for at
			// once may still find it held (seen once in a loaded run): ask
			// again, and count from the attempt that was granted.
			time.Sleep(margin)
			var c *idgen.NodeLease
			var asked time.Time
			for start := testenv.Now(); c == nil; time.Sleep(2 * time.Millisecond) {
				asked = testenv.Now()
				c, err = idgen.LeaseNode(ctx, failing, cfg)
				if err != nil && (!errors.Is(err, idgen.ErrNoFreeNode) || testenv.Since(start) > 10*time.Second) {
					t.Fatal(err)
				}
			}
			defer c.Close()
			<-c.Done()
			d := waitForLease(t, store, cfg)
			defer d.Close()
			if waited := testenv.Since(asked); waited < cfg.TTL+margin-2*time.Millisecond {
				t.Fatalf("expired id granted again %v after its grant, want ≥ ttl %v + margin %v", waited, cfg.TTL, margin)
			}
			if c.Token() <= b.Token() || d.Token() <= c.Token() {
				t.Fatalf("tokens %d, %d, %d do not grow", b.Token(), c.Token(), d.Token())
			}
		})
	}
}

func waitForLease(t *testing.T, store idgen.NodeStore, cfg idgen.NodeLeaseConfig) *idgen.NodeLease {
	t.Helper()
	start := testenv.Now()
	for testenv.Since(start) < 10*time.Second {
		l, err := idgen.LeaseNode(context.Background(), store, cfg)
		if err == nil {
			return l
		}
		if !errors.Is(err, idgen.ErrNoFreeNode) {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("no lease in 10 s")
	return nil
}

// A grant whose reply was lost is retried by go-redis; the retry finds the
// lease it already made instead of taking a second id.
func TestNodeLeaseGrantRetriedAfterLostReply(t *testing.T) {
	ctx := context.Background()
	r, p := testenv.NewFaultyRedis(t)
	r.NeedsServer(t, "replies lost through the proxy")
	store := idgen.NewRedisNodeStore(r.Client, r.Namespace)
	cfg := idgen.NodeLeaseConfig{Pool: "p", Count: 2, Now: testenv.Now}
	p.DropReplies(1)
	a, err := idgen.LeaseNode(ctx, store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if p.Cuts() != 1 {
		t.Fatalf("%d replies lost, want 1", p.Cuts())
	}
	b, err := idgen.LeaseNode(ctx, store, cfg)
	if err != nil {
		t.Fatalf("the retried grant took both ids: %v", err)
	}
	defer b.Close()
	if a.ID() == b.ID() {
		t.Fatalf("both leases hold node %d", a.ID())
	}
}

// Bad configuration is an ErrLeaseConfig and asks the store nothing; a
// snowflake whose NodeID contradicts its lease is refused.
func TestNodeLeaseConfigErrors(t *testing.T) {
	ctx := context.Background()
	store := &countingStore{NodeStore: nodeStores()["redis"](t)}
	for _, cfg := range []idgen.NodeLeaseConfig{
		{Pool: "has space"}, {Pool: strings.Repeat("p", 65)}, {First: -1}, {First: 1000, Count: 30},
		{Count: -1}, {TTL: time.Millisecond}, {TTL: time.Second, RenewEvery: time.Second},
		{TTL: time.Second, RenewEvery: -time.Second}, {Margin: -time.Second},
	} {
		if _, err := idgen.LeaseNode(ctx, store, cfg); !errors.Is(err, idgen.ErrLeaseConfig) {
			t.Errorf("%+v: %v, want ErrLeaseConfig", cfg, err)
		}
	}
	if _, err := idgen.LeaseNode(ctx, nil, idgen.NodeLeaseConfig{}); !errors.Is(err, idgen.ErrLeaseConfig) {
		t.Errorf("nil store: %v", err)
	}
	if n := store.grants.Load(); n != 0 {
		t.Fatalf("bad configs reached the store %d times", n)
	}
	if _, err := idgen.NewSQLNodeStore(testenv.NewSQL(t), "x; DROP TABLE y"); !errors.Is(err, idgen.ErrLeaseConfig) {
		t.Errorf("hostile table name: %v", err)
	}
	l, err := idgen.LeaseNode(ctx, store, idgen.NodeLeaseConfig{First: 5, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{NodeID: 6, Node: l}); !errors.Is(err, idgen.ErrNodeID) {
		t.Errorf("NodeID 6 on a lease of node 5: %v", err)
	}
	l.Close()
	if _, err := idgen.NewSnowflake(ctx, idgen.SnowflakeConfig{Node: l}); !errors.Is(err, idgen.ErrLeaseLost) {
		t.Errorf("snowflake on a closed lease: %v", err)
	}
}
