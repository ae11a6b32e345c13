package shortlink_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/idgen"
	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newClock starts at the current second (whole seconds keep expiries exact).
func newClock() *testenv.Clock { return testenv.NewClock(testenv.Now().Truncate(time.Second)) }

// newService builds a Service on the harness backends, with 16 tables unless
// cfg says otherwise (256 tables take a while to create per test).
func newService(t testing.TB, r *testenv.Redis, cfg shortlink.Config) *shortlink.Service {
	t.Helper()
	if cfg.TablesPerDB == 0 {
		cfg.TablesPerDB = 16
	}
	return newServiceOn(t, r, testenv.NewSQL(t), cfg)
}

func newServiceOn(t testing.TB, r *testenv.Redis, db *sqlx.DB, cfg shortlink.Config) *shortlink.Service {
	t.Helper()
	if cfg.BaseURL == "" {
		cfg.BaseURL = "https://sho.rt"
	}
	cfg.Namespace = r.Namespace
	cfg.OnError = func(err error) { t.Errorf("background: %v", err) }
	s, err := shortlink.NewService(r.Client, []*sqlx.DB{db}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		testenv.DeleteKeys(context.Background(), r.Client, "rate:"+r.Namespace+"*") // redis_rate's own prefix
	})
	return s
}

func TestShortenResolve(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		db := testenv.NewSQL(t)
		cfg := shortlink.Config{TablesPerDB: 256}
		a := newServiceOn(t, r, db, cfg)
		l, err := a.Shorten(ctx, "HTTPS://Example.COM:443/a/b?q=1#frag", shortlink.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Code) != 7 || l.URL != "https://example.com/a/b?q=1#frag" {
			t.Fatalf("link %+v", l)
		}
		if a.ShortURL(l.Code) != "https://sho.rt/"+l.Code {
			t.Fatalf("short URL %s", a.ShortURL(l.Code))
		}
		for range 3 {
			got, err := a.Resolve(ctx, l.Code)
			if err != nil || got.URL != l.URL {
				t.Fatalf("Resolve = %+v, %v", got, err)
			}
		}
		if st := a.CacheStats(); st.SQLReads != 1 || st.LocalHits+st.RedisHits != 2 {
			t.Fatalf("3 resolves: want 1 SQL read and 2 cache hits, got %+v", st)
		}
		// A second process: empty local cache, warm Redis.
		b := newServiceOn(t, r, db, cfg)
		if got, err := b.Resolve(ctx, l.Code); err != nil || got.URL != l.URL {
			t.Fatalf("second instance: %+v, %v", got, err)
		}
		if st := b.CacheStats(); st.RedisHits != 1 || st.SQLReads != 0 {
			t.Fatalf("second instance should hit Redis: %+v", st)
		}
	})
}

func TestSnowflakeCodes(t *testing.T) {
	ctx := context.Background()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{Codes: shortlink.SnowflakeCodes, SnowflakeNode: 5})
	l, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{})
	if err != nil || len(l.Code) != 11 {
		t.Fatalf("%+v, %v", l, err)
	}
	if got, err := s.Resolve(ctx, l.Code); err != nil || got.URL != "https://example.com/" {
		t.Fatalf("%+v, %v", got, err)
	}
}

func TestConcurrentShortenNoDuplicate(t *testing.T) {
	ctx := context.Background()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{SegmentStep: 50})
	var mu sync.Mutex
	codes := map[string]string{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				u := fmt.Sprintf("https://example.com/%d/%d", g, i)
				l, err := s.Shorten(ctx, u, shortlink.Options{})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if prev, dup := codes[l.Code]; dup {
					t.Errorf("code %s given to %s and %s", l.Code, prev, u)
				}
				codes[l.Code] = u
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(codes) != 800 {
		t.Fatalf("%d codes", len(codes))
	}
	for code, u := range codes {
		if l, err := s.Resolve(ctx, code); err != nil || l.URL != u {
			t.Fatalf("%s → %+v, %v; want %s", code, l, err, u)
		}
	}
}

// Many callers race for one alias: exactly one wins, everyone else is told
// the alias is taken, and the alias resolves to the winner's URL.
func TestAliasRace(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		s := newService(t, r, shortlink.Config{})
		var wins, taken atomic.Int64
		var winner atomic.Value
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				u := fmt.Sprintf("https://example.com/%d", i)
				_, err := s.Shorten(ctx, u, shortlink.Options{Alias: "launch"})
				switch {
				case err == nil:
					wins.Add(1)
					winner.Store(u)
				case errors.Is(err, shortlink.ErrAliasTaken):
					taken.Add(1)
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 || taken.Load() != 49 {
			t.Fatalf("%d wins, %d taken", wins.Load(), taken.Load())
		}
		if l, err := s.Resolve(ctx, "launch"); err != nil || l.URL != winner.Load() {
			t.Fatalf("alias resolves to %+v, %v; winner %v", l, err, winner.Load())
		}
	})
}

func TestExpiry(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{Now: clk.Now})
	l, err := s.Shorten(ctx, "https://example.com/sale", shortlink.Options{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(59 * time.Minute)
	if _, err := s.Resolve(ctx, l.Code); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	clk.Add(time.Minute)
	if _, err := s.Resolve(ctx, l.Code); !errors.Is(err, shortlink.ErrExpired) {
		t.Fatalf("at expiry: %v, want ErrExpired", err)
	}
	at, err := s.Shorten(ctx, "https://example.com/at", shortlink.Options{ExpiresAt: clk.Now().Add(time.Minute)})
	if err != nil || !at.ExpiresAt.Equal(clk.Now().Add(time.Minute).Truncate(time.Millisecond)) {
		t.Fatalf("%+v, %v", at, err)
	}
	for _, o := range []shortlink.Options{
		{ExpiresAt: clk.Now().Add(-time.Second)},
		{ExpiresAt: clk.Now().Add(time.Hour), TTL: time.Hour},
		{TTL: -time.Second},
		{MaxVisits: -1},
		{Redirect: 303},
	} {
		if _, err := s.Shorten(ctx, "https://example.com/x", o); !errors.Is(err, shortlink.ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", o, err)
		}
	}
}

// 100 concurrent clicks on a link limited to 10 visits: exactly 10 succeed.
func TestMaxVisitsExactUnderConcurrency(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		s := newService(t, r, shortlink.Config{})
		l, err := s.Shorten(ctx, "https://example.com/limited", shortlink.Options{MaxVisits: 10})
		if err != nil {
			t.Fatal(err)
		}
		var ok, gone atomic.Int64
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				_, err := s.Resolve(ctx, l.Code)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, shortlink.ErrMaxVisits) && errors.Is(err, shortlink.ErrExpired):
					gone.Add(1)
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if ok.Load() != 10 || gone.Load() != 90 {
			t.Fatalf("%d redirects, %d refused; want 10 and 90", ok.Load(), gone.Load())
		}
	})
}

func TestURLValidation(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewSQL(t)
	r := testenv.NewRedis(t)
	s := newServiceOn(t, r, db, shortlink.Config{TablesPerDB: 4, OwnHosts: []string{"go.sho.rt"}, Blocklist: []string{"evil.example", "Malware.TEST"}})
	hostile := []string{
		"", "javascript:alert(1)", "JavaScript:alert(document.cookie)", "data:text/html,<script>alert(1)</script>",
		"file:///etc/passwd", "ftp://example.com/", "mailto:a@example.com", "//example.com/x", "example.com",
		"http://user:pass@example.com/", "https://user@example.com/", "http://", "http:///path", "http://exa mple.com/",
		"http://example.com/\x00", "http://ex_ample.com/", "http://-bad.com/", "http://example.com:99999/",
		"https://sho.rt/abc", "https://SHO.RT./abc", "https://go.sho.rt/x", "https://evil.example/", "https://a.b.evil.example/p",
		"http://malware.test", "https://example.com/" + strings.Repeat("a", 2048), " https://example.com/",
		"http:example.com", "https://[::1", "https://%65xample.com/",
	}
	for _, u := range hostile {
		if l, err := s.Shorten(ctx, u, shortlink.Options{}); !errors.Is(err, shortlink.ErrInvalidURL) {
			t.Errorf("Shorten(%q) = %+v, %v; want ErrInvalidURL", u, l, err)
		}
	}
	if _, err := s.Shorten(ctx, "https://sub.evil.example/", shortlink.Options{}); !errors.Is(err, shortlink.ErrBlocked) {
		t.Errorf("blocked subdomain: %v, want ErrBlocked", err)
	}
	if rows := countLinks(t, db, 4); rows != 0 { // nothing was written by any refusal
		t.Fatalf("refused links left %d rows", rows)
	}
	normal := map[string]string{
		"HTTP://EXAMPLE.com":            "http://example.com/",
		"http://example.com:80/a":       "http://example.com/a",
		"https://example.com.:8443/a?b": "https://example.com:8443/a?b",
		"https://[::1]:443/x":           "https://[::1]/x",
		"https://xn--bcher-kva.example": "https://xn--bcher-kva.example/",
	}
	for in, want := range normal {
		l, err := s.Shorten(ctx, in, shortlink.Options{})
		if err != nil || l.URL != want {
			t.Errorf("Shorten(%q) = %+v, %v; want %s", in, l, err, want)
		}
	}
}

func TestAliasValidation(t *testing.T) {
	ctx := context.Background()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{Reserved: []string{"Pricing"}})
	for _, a := range []string{"ab", strings.Repeat("a", 65), "api", "API", "pricing", "has space", "dot.ted", "slash/x", "ünï"} {
		if _, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{Alias: a}); !errors.Is(err, shortlink.ErrInvalidAlias) {
			t.Errorf("alias %q: %v, want ErrInvalidAlias", a, err)
		}
	}
	if _, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{Alias: "my-Link_2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, "MY-LINK_2"); !errors.Is(err, shortlink.ErrNotFound) {
		t.Fatalf("codes are case-sensitive: %v", err)
	}
}

// Delete stops a link at once here and in Redis, and in another process's
// local cache within its LocalTTL.
func TestDeleteInvalidatesCaches(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	a := newServiceOn(t, r, db, shortlink.Config{TablesPerDB: 4})
	b := newServiceOn(t, r, db, shortlink.Config{TablesPerDB: 4, LocalTTL: 100 * time.Millisecond})
	l, _ := a.Shorten(ctx, "https://example.com/del", shortlink.Options{})
	for _, s := range []*shortlink.Service{a, b, a, b} {
		if _, err := s.Resolve(ctx, l.Code); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Delete(ctx, l.Code); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Resolve(ctx, l.Code); !errors.Is(err, shortlink.ErrNotFound) {
		t.Fatalf("deleting instance still resolves: %v", err)
	}
	time.Sleep(150 * time.Millisecond)
	if _, err := b.Resolve(ctx, l.Code); !errors.Is(err, shortlink.ErrNotFound) {
		t.Fatalf("other instance resolves past its LocalTTL: %v", err)
	}
	if err := a.Delete(ctx, l.Code); !errors.Is(err, shortlink.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

// A miss is remembered, and forgotten the moment the code is created.
func TestNegativeCacheAndCreate(t *testing.T) {
	ctx := context.Background()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{})
	var wg sync.WaitGroup
	for range 50 { // a hot miss: one SQL read for all of them
		wg.Go(func() {
			if _, err := s.Resolve(ctx, "hello"); !errors.Is(err, shortlink.ErrNotFound) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if st := s.CacheStats(); st.SQLReads != 1 {
		t.Fatalf("50 concurrent misses caused %d SQL reads, want 1", st.SQLReads)
	}
	if _, err := s.Shorten(ctx, "https://example.com/hello", shortlink.Options{Alias: "hello"}); err != nil {
		t.Fatal(err)
	}
	if l, err := s.Resolve(ctx, "hello"); err != nil || l.URL != "https://example.com/hello" {
		t.Fatalf("remembered miss served after create: %+v, %v", l, err)
	}
}

func TestClicksCountedAndFlushed(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	s, err := shortlink.NewService(r.Client, []*sqlx.DB{db}, shortlink.Config{BaseURL: "https://sho.rt", Namespace: r.Namespace, TablesPerDB: 4, FlushEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.Migrate(ctx)
	l, _ := s.Shorten(ctx, "https://example.com/c", shortlink.Options{})
	var wg sync.WaitGroup
	for range 25 {
		wg.Go(func() { s.Resolve(ctx, l.Code) })
	}
	wg.Wait()
	if st, _ := s.Stats(ctx, l.Code); st.Clicks != 25 {
		t.Fatalf("stats %d clicks before the flush, want 25", st.Clicks)
	}
	var stored int64
	db.Get(&stored, "SELECT clicks FROM "+tableOf(t, db, l.Code))
	if stored != 0 {
		t.Fatalf("clicks written per redirect: %d in SQL before the flush", stored)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	db.Get(&stored, "SELECT clicks FROM "+tableOf(t, db, l.Code))
	if stored != 25 {
		t.Fatalf("%d clicks in SQL after Close, want 25", stored)
	}
}

// tableOf finds the table holding code by asking every table.
func tableOf(t *testing.T, db *sqlx.DB, code string) string {
	for i := range 4 {
		table := fmt.Sprintf("links_%03d", i)
		var n int
		db.Get(&n, "SELECT COUNT(*) FROM "+table+" WHERE code = ?", code)
		if n == 1 {
			return table + " WHERE code = '" + code + "'"
		}
	}
	t.Fatalf("code %s in no table", code)
	return ""
}

// Close may be called twice, and once it returns no goroutine the Service
// started (click flusher, code segment prefetch, local cache) is left.
func TestCloseTwiceStopsEverything(t *testing.T) {
	ctx := context.Background()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{SegmentStep: 10})
	for i := range 5 { // with 10 codes a lease, the 2nd starts a prefetch
		if _, err := s.Shorten(ctx, fmt.Sprintf("https://example.com/%d", i), shortlink.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Shorten(ctx, "https://example.com/late", shortlink.Options{}); !errors.Is(err, shortlink.ErrClosed) {
		t.Fatalf("Shorten after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Resolve(ctx, "abcdefg"); !errors.Is(err, shortlink.ErrClosed) {
		t.Fatalf("Resolve after Close: %v, want ErrClosed", err)
	}
	if left := goroutinesIn("casebook-dev/casebook/shortlink.", "casebook-dev/casebook/idgen.", "dgraph-io/ristretto"); left != "" {
		t.Fatalf("goroutines left after Close:\n%s", left)
	}
}

// goroutinesIn returns the stacks of goroutines running code of any of the
// packages, waiting a little for those on their way out.
func goroutinesIn(pkgs ...string) string {
	var left []string
	for range 50 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		left = left[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, p := range pkgs {
				if strings.Contains(g, p) {
					left = append(left, g)
					break
				}
			}
		}
		if len(left) == 0 {
			return ""
		}
		time.Sleep(10 * time.Millisecond)
	}
	return strings.Join(left, "\n\n")
}

// With no CodeKey, processes starting together on a fresh namespace agree on
// one random key, stored beside the data: every code they issue decodes with
// it to a counter of theirs. A restarted process keeps the key, and another
// deployment draws another.
func TestGeneratedCodeKey(t *testing.T) {
	const processes, perProcess, step = 8, 5, 10
	ctx := context.Background()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	cfg := shortlink.Config{TablesPerDB: 4, SegmentStep: step}
	services := make([]*shortlink.Service, processes+1)
	for i := range services {
		services[i] = newServiceOn(t, r, db, cfg)
	}
	var mu sync.Mutex
	var codes []string
	shorten := func(s *shortlink.Service, n int) {
		for i := range n {
			l, err := s.Shorten(ctx, fmt.Sprintf("https://example.com/%d", i), shortlink.Options{})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			codes = append(codes, l.Code)
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for _, s := range services[:processes] {
		wg.Go(func() { shorten(s, perProcess) })
	}
	wg.Wait()
	services[0].Shutdown(ctx)
	shorten(services[processes], 1) // a restart of the first process

	key := storedKey(t, db)
	stored, _ := idgen.NewShortCodes(nil, idgen.ShortCodeConfig{Key: key})
	leased := uint64((processes + 1) * 2 * step) // each process: a lease and a prefetched one
	seen := map[uint64]bool{}
	for _, c := range codes {
		n, err := stored.Decode(c)
		if err != nil || n < 1 || n > leased || seen[n] {
			t.Fatalf("code %s decodes to counter %d (%v) under the stored key: not one of the %d leased, or twice", c, n, err, leased)
		}
		seen[n] = true
	}
	if len(codes) != processes*perProcess+1 {
		t.Fatalf("%d codes", len(codes))
	}
	other := testenv.NewSQL(t)
	shorten(newServiceOn(t, r, other, cfg), 1)
	if storedKey(t, other) == key {
		t.Fatal("two deployments drew the same key")
	}
}

func storedKey(t *testing.T, db *sqlx.DB) uint64 {
	t.Helper()
	var v string
	if err := db.Get(&v, "SELECT value FROM shortlink_meta WHERE name LIKE '%code_key'"); err != nil {
		t.Fatalf("stored code key: %v", err)
	}
	key, err := strconv.ParseUint(v, 10, 64)
	if err != nil || key == 0 {
		t.Fatalf("stored code key %q", v)
	}
	return key
}

// Every spelling a browser takes to this service's host is a loop, and every
// spelling of a blocked domain is blocked; hosts are stored canonically.
func TestHostSpellings(t *testing.T) {
	ctx := context.Background()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{
		BaseURL: "http://127.0.0.1:8080", OwnHosts: []string{"Go.Sho.RT.", "[::1]"}, Blocklist: []string{"evil.example", "0x0A.1"},
	})
	own := []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "0x7F.0.0.1", "017700000001", "127.0.0.1.",
		"[::ffff:127.0.0.1]", "[::FFFF:7f00:1]", "[0:0:0:0:0:ffff:127.0.0.1]", "localhost", "LocalHost.", "a.localhost",
		"0.0.0.0", "0", "127.0.0.2", "[::]", "[0:0::1]", "go.sho.rt", "GO.SHO.RT.", "127.0.0.1:80", "127.1:8080"}
	for _, h := range own {
		u := "http://" + h + "/x"
		if l, err := s.Shorten(ctx, u, shortlink.Options{}); !errors.Is(err, shortlink.ErrInvalidURL) || errors.Is(err, shortlink.ErrBlocked) {
			t.Errorf("Shorten(%q) = %+v, %v; want a loop refused", u, l, err)
		}
	}
	for _, h := range []string{"EVIL.example.", "Sub.Evil.Example.", "10.0.0.1", "012.0.0.1", "167772161", "[::ffff:a00:1]"} {
		u := "https://" + h + "/x"
		if l, err := s.Shorten(ctx, u, shortlink.Options{}); !errors.Is(err, shortlink.ErrBlocked) {
			t.Errorf("Shorten(%q) = %+v, %v; want ErrBlocked", u, l, err)
		}
	}
	for in, want := range map[string]string{
		"http://0x5db8d822/":         "http://93.184.216.34/",
		"http://Example.COM.:0080/a": "http://example.com/a",
		"https://[2001:DB8::0:1]/":   "https://[2001:db8::1]/",
		"http://notevil.example/":    "http://notevil.example/",
	} {
		if l, err := s.Shorten(ctx, in, shortlink.Options{}); err != nil || l.URL != want {
			t.Errorf("Shorten(%q) = %+v, %v; want %s", in, l, err, want)
		}
	}
	for _, cfg := range []shortlink.Config{{Blocklist: []string{"*.evil.example"}}, {OwnHosts: []string{"exa mple"}}, {BaseURL: "http://1.2.3.4.5/"}} {
		cfg.BaseURL = cmp.Or(cfg.BaseURL, "https://sho.rt")
		if _, err := shortlink.NewService(testenv.NewRedis(t).Client, []*sqlx.DB{testenv.NewSQL(t)}, cfg); !errors.Is(err, shortlink.ErrConfig) {
			t.Errorf("New(%+v): %v, want ErrConfig", cfg, err)
		}
	}
}

// TestClickFlushLogs: a click flush that fails is logged at Warn with the
// codes whose counts it keeps, and counted in a row; the flush that
// succeeds after it logs recovery at Info and writes the kept counts.
func TestClickFlushLogs(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	logs := obstest.NewLogs()
	errs := make(chan error, 100)
	s, err := shortlink.NewService(r.Client, []*sqlx.DB{db}, shortlink.Config{BaseURL: "https://sho.rt", Namespace: r.Namespace, TablesPerDB: 1,
		FlushEvery: 10 * time.Millisecond, Logger: logs.Logger, OnError: func(err error) { errs <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := s.Shorten(ctx, "https://example.com/c", shortlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const table = "links_000" // the only one (TablesPerDB 1)
	stored := func(want int64) {
		t.Helper()
		var n int64
		for deadline := 0; n != want; deadline++ {
			if deadline == 500 {
				t.Fatalf("%d clicks in SQL, want %d", n, want)
			}
			time.Sleep(10 * time.Millisecond)
			db.Get(&n, "SELECT clicks FROM "+table)
		}
	}
	if _, err := s.Resolve(ctx, l.Code); err != nil { // cached from here on
		t.Fatal(err)
	}
	stored(1)
	if _, err := db.Exec("ALTER TABLE " + table + " RENAME TO " + table + "_away"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Resolve(ctx, l.Code); err != nil {
			t.Fatal(err)
		}
	}
	<-errs
	<-errs // two flushes failed
	if _, err := db.Exec("ALTER TABLE " + table + "_away RENAME TO " + table); err != nil {
		t.Fatal(err)
	}
	stored(4)
	s.Close()
	lines := logs.Lines()
	failed := 0
	for _, line := range lines[:len(lines)-1] {
		failed++
		want := fmt.Sprintf("WARN shortlink: click flush failed; its counts stay for the next casebook.block=shortlink codes_kept=1 failed_flushes=%d retry_in=10ms err=", failed)
		if !strings.HasPrefix(line, want) {
			t.Fatalf("line %d: %q, want it to begin %q", failed, line, want)
		}
	}
	if want := fmt.Sprintf("INFO shortlink: click flush recovered casebook.block=shortlink failed_flushes=%d", failed); failed < 2 || lines[len(lines)-1] != want {
		t.Fatalf("logged %q, want ≥ 2 failures then %q", lines, want)
	}
}
