package shortlink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

// noFollow is a client that reports redirects instead of following them.
var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func post(t *testing.T, base string, body any, ip string) (*http.Response, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", base+"/api/links", bytes.NewReader(b))
	return send(t, req, ip)
}

// send sends req from client ip (X-Test-IP) without following redirects
// and decodes the JSON reply, if any.
func send(t *testing.T, req *http.Request, ip string) (*http.Response, map[string]any) {
	t.Helper()
	req.Header.Set("X-Test-IP", ip)
	res, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	json.NewDecoder(res.Body).Decode(&out)
	return res, out
}

func get(t *testing.T, url, ip string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-Test-IP", ip)
	res, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res
}

// testIP lets one test act as many clients.
func testIP(r *http.Request) string { return r.Header.Get("X-Test-IP") }

func server(t *testing.T, s *shortlink.Service) string {
	srv := httptest.NewServer(s.Handler(testIP))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestHandlerRedirectsAndCaching(t *testing.T) {
	clk := newClock()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{Now: clk.Now})
	base := server(t, s)

	res, body := post(t, base, map[string]any{"url": "https://example.com/a"}, "1.1.1.1")
	if res.StatusCode != 201 || body["url"] != "https://example.com/a" || body["short_url"] != "https://sho.rt/"+body["code"].(string) {
		t.Fatalf("create: %d %v", res.StatusCode, body)
	}
	temp := body["code"].(string)
	_, perm := post(t, base, map[string]any{"url": "https://example.com/p", "redirect": 301}, "1.1.1.1")
	_, soon := post(t, base, map[string]any{"url": "https://example.com/s", "redirect": 301, "ttl_seconds": 120}, "1.1.1.1")
	_, limited := post(t, base, map[string]any{"url": "https://example.com/l", "max_visits": 1}, "1.1.1.1")
	_, expiring := post(t, base, map[string]any{"url": "https://example.com/e", "ttl_seconds": 60}, "1.1.1.1")

	cases := []struct {
		code, location, cache string
		status                int
	}{
		{temp, "https://example.com/a", "private, max-age=0", 302},
		{perm["code"].(string), "https://example.com/p", "public, max-age=86400", 301},
		{soon["code"].(string), "https://example.com/s", "public, max-age=120", 301},
		{limited["code"].(string), "https://example.com/l", "no-store", 302},
	}
	for _, c := range cases {
		res := get(t, base+"/"+c.code, "2.2.2.2")
		if res.StatusCode != c.status || res.Header.Get("Location") != c.location || res.Header.Get("Cache-Control") != c.cache {
			t.Errorf("GET /%s: %d %q %q; want %d %q %q", c.code, res.StatusCode, res.Header.Get("Location"), res.Header.Get("Cache-Control"), c.status, c.location, c.cache)
		}
	}
	if res := get(t, base+"/"+limited["code"].(string), "2.2.2.2"); res.StatusCode != 410 {
		t.Errorf("used-up link: %d, want 410", res.StatusCode)
	}
	if res := get(t, base+"/nosuchcode", "2.2.2.2"); res.StatusCode != 404 {
		t.Errorf("unknown: %d, want 404", res.StatusCode)
	}
	clk.Add(2 * time.Minute)
	if res := get(t, base+"/"+expiring["code"].(string), "2.2.2.2"); res.StatusCode != 410 {
		t.Errorf("expired: %d, want 410", res.StatusCode)
	}

	// Bad requests.
	for body, want := range map[string]int{
		`{"url":"javascript:alert(1)"}`:                400,
		`{"url":"https://example.com/","alias":"api"}`: 400,
		`{"url":"https://example.com/","bogus":1}`:     400,
		`not json`: 400,
	} {
		res, err := http.Post(base+"/api/links", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("POST %s: %d, want %d", body, res.StatusCode, want)
		}
	}
	if res, _ := post(t, base, map[string]any{"url": "https://example.com/x", "alias": temp}, "1.1.1.1"); res.StatusCode != 409 {
		t.Errorf("taken alias: %d, want 409", res.StatusCode)
	}

	// Stats and delete through the API.
	s.Resolve(context.Background(), temp)
	res = get(t, base+"/api/links/"+temp, "3.3.3.3")
	if res.StatusCode != 200 {
		t.Fatalf("stats: %d", res.StatusCode)
	}
	req, _ := http.NewRequest("DELETE", base+"/api/links/"+temp, nil)
	if res, _ := noFollow.Do(req); res.StatusCode != 204 {
		t.Fatalf("delete: %d", res.StatusCode)
	}
	if res := get(t, base+"/"+temp, "2.2.2.2"); res.StatusCode != 404 {
		t.Errorf("deleted: %d, want 404", res.StatusCode)
	}
}

func TestServiceWidePermanentRedirects(t *testing.T) {
	s := newService(t, testenv.NewRedis(t), shortlink.Config{Redirect: 301, PermanentMaxAge: time.Hour})
	base := server(t, s)
	_, body := post(t, base, map[string]any{"url": "https://example.com/"}, "1.1.1.1")
	res := get(t, base+"/"+body["code"].(string), "1.1.1.1")
	if res.StatusCode != 301 || res.Header.Get("Cache-Control") != "public, max-age=3600" {
		t.Fatalf("%d %q", res.StatusCode, res.Header.Get("Cache-Control"))
	}
}

// Creation is limited per IP; misses are too, and an IP out of miss budget
// gets 429 even for codes that exist (so walking the code space stalls).
func TestRateLimits(t *testing.T) { eachMissMode(t, testRateLimits) }

func testRateLimits(t *testing.T, local bool) {
	s := newService(t, testenv.NewRedis(t), shortlink.Config{SharedMissCheck: !local, CreateLimit: redis_rate.PerMinute(5), MissLimit: redis_rate.PerMinute(3)})
	base := server(t, s)
	var code string
	for i := range 7 {
		res, body := post(t, base, map[string]any{"url": "https://example.com/"}, "10.0.0.1")
		want := 201
		if i >= 5 {
			want = 429
		}
		if res.StatusCode != want {
			t.Fatalf("create %d from one IP: %d, want %d", i+1, res.StatusCode, want)
		}
		if i == 0 {
			code = body["code"].(string)
		}
	}
	if res, _ := post(t, base, map[string]any{"url": "https://example.com/"}, "10.0.0.2"); res.StatusCode != 201 {
		t.Fatalf("another IP: %d, want 201", res.StatusCode)
	}
	for i := range 3 {
		if res := get(t, base+"/walk"+string(rune('a'+i)), "10.0.0.3"); res.StatusCode != 404 {
			t.Fatalf("miss %d: %d, want 404", i+1, res.StatusCode)
		}
	}
	if res := get(t, base+"/walkz", "10.0.0.3"); res.StatusCode != 429 {
		t.Fatalf("4th miss: %d, want 429", res.StatusCode)
	}
	if res := get(t, base+"/walky", "10.0.0.4"); res.StatusCode != 404 {
		t.Fatalf("miss from a fresh IP: %d, want 404", res.StatusCode)
	}
	for i := range 10 { // hits cost no budget
		if res := get(t, base+"/"+code, "10.0.0.4"); res.StatusCode != 302 {
			t.Fatalf("hit %d: %d, want 302", i+1, res.StatusCode)
		}
	}
	if res := get(t, base+"/walkx", "10.0.0.4"); res.StatusCode != 404 {
		t.Fatalf("2nd miss after 10 hits: %d, want 404", res.StatusCode)
	}
}

// An IP out of miss budget learns nothing more: every code answers 429 with
// Retry-After before any lookup (no cache or SQL read), in the handler's
// redirect, stats and delete routes and in ResolveWith alike.
func TestMissLimitBeforeLookup(t *testing.T) { eachMissMode(t, testMissLimitBeforeLookup) }

func testMissLimitBeforeLookup(t *testing.T, local bool) {
	ctx := context.Background()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{SharedMissCheck: !local, MissLimit: redis_rate.PerMinute(3)})
	base := server(t, s)
	l, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const walker = "10.9.0.1"
	for i := range 3 {
		if res := get(t, fmt.Sprintf("%s/walk%d", base, i), walker); res.StatusCode != 404 {
			t.Fatalf("miss %d: %d, want 404", i+1, res.StatusCode)
		}
	}
	before := s.CacheStats()
	for _, path := range []string{"/" + l.Code, "/walk9", "/nosuchcode", "/api/links/" + l.Code, "/api/links/walk9"} {
		res := get(t, base+path, walker)
		if secs, err := strconv.Atoi(res.Header.Get("Retry-After")); res.StatusCode != 429 || err != nil || secs < 1 || secs > 20 {
			t.Errorf("GET %s with no budget: %d, Retry-After %q; want 429 within 20 s", path, res.StatusCode, res.Header.Get("Retry-After"))
		}
	}
	req, _ := http.NewRequest("DELETE", base+"/api/links/"+l.Code, nil)
	req.Header.Set("X-Test-IP", walker)
	if res, err := noFollow.Do(req); err != nil || res.StatusCode != 429 {
		t.Errorf("DELETE with no budget: %v, %v; want 429", res.StatusCode, err)
	}
	_, err = s.ResolveWith(ctx, l.Code, shortlink.ResolveOptions{ClientIP: walker})
	var limited *shortlink.RateLimitError
	if !errors.As(err, &limited) || !errors.Is(err, shortlink.ErrRateLimited) || limited.RetryAfter <= 0 || limited.RetryAfter > 20*time.Second {
		t.Errorf("ResolveWith with no budget: %v, want a RateLimitError within 20 s", err)
	}
	if after := s.CacheStats(); after != before {
		t.Errorf("refused requests were looked up: %+v → %+v", before, after)
	}
	// The library charges one unit per miss, and hits are free.
	for i := range 5 {
		if _, err := s.ResolveWith(ctx, l.Code, shortlink.ResolveOptions{ClientIP: "10.9.0.2"}); err != nil {
			t.Fatalf("hit %d: %v", i+1, err)
		}
	}
	for i := range 3 {
		if _, err := s.ResolveWith(ctx, fmt.Sprintf("miss%d", i), shortlink.ResolveOptions{ClientIP: "10.9.0.2"}); !errors.Is(err, shortlink.ErrNotFound) {
			t.Fatalf("miss %d: %v, want ErrNotFound", i+1, err)
		}
	}
	if _, err := s.ResolveWith(ctx, "miss3", shortlink.ResolveOptions{ClientIP: "10.9.0.2"}); !errors.Is(err, shortlink.ErrRateLimited) {
		t.Fatalf("4th miss: %v, want ErrRateLimited", err)
	}
}

// Every number the API takes is bounded before use: nothing overflows into
// a short or negative lifetime, and a refused request writes nothing.
func TestNumericInputsBounded(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	db := testenv.NewSQL(t)
	s := newServiceOn(t, testenv.NewRedis(t), db, shortlink.Config{TablesPerDB: 4, Now: clk.Now})
	base := server(t, s)
	maxTTL := int64(shortlink.MaxLifetime / time.Second)
	for _, body := range []string{
		`"ttl_seconds": 18446744074`, // × 1e9 ns wraps to 0.29 s
		`"ttl_seconds": 9223372037`,  // wraps negative
		`"ttl_seconds": ` + strconv.FormatInt(maxTTL+1, 10),
		`"ttl_seconds": 0`, `"ttl_seconds": -5`, `"ttl_seconds": 1.5`, `"ttl_seconds": 1e400`,
		`"expires_at": "9999-12-31T23:59:59Z"`, `"expires_at": "0001-01-01T00:00:00Z"`,
		`"expires_at": "` + clk.Now().Add(-time.Second).Format(time.RFC3339) + `"`,
		`"expires_at": "` + clk.Now().Add(shortlink.MaxLifetime+time.Second).Format(time.RFC3339) + `"`,
		`"expires_at": "` + clk.Now().Format(time.RFC3339Nano) + `"`,
		`"max_visits": -1`, `"max_visits": 9007199254740992`, `"max_visits": 9223372036854775807`,
		`"redirect": -302`, `"redirect": 200`,
	} {
		res, out := postRaw(t, base, `{"url": "https://example.com/", `+body+`}`)
		if res.StatusCode != 400 {
			t.Errorf("POST {%s}: %d %v, want 400", body, res.StatusCode, out)
		}
	}
	if n := countLinks(t, db, 4); n != 0 {
		t.Fatalf("refused requests left %d rows", n)
	}
	for _, body := range []string{
		`"ttl_seconds": ` + strconv.FormatInt(maxTTL, 10),
		`"expires_at": "` + clk.Now().Add(shortlink.MaxLifetime).Format(time.RFC3339) + `"`,
		`"max_visits": 9007199254740991`, `"ttl_seconds": null, "expires_at": null`,
	} {
		if res, out := postRaw(t, base, `{"url": "https://example.com/", `+body+`}`); res.StatusCode != 201 {
			t.Errorf("POST {%s}: %d %v, want 201", body, res.StatusCode, out)
		}
	}
	for _, o := range []shortlink.Options{
		{TTL: shortlink.MaxLifetime + 1}, {TTL: time.Duration(math.MaxInt64)}, {TTL: time.Microsecond},
		// calendar: the year 9999 is past the longest lifetime from any date
		{ExpiresAt: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}, {ExpiresAt: clk.Now()},
		{MaxVisits: shortlink.MaxVisitLimit + 1},
	} {
		if _, err := s.Shorten(ctx, "https://example.com/", o); !errors.Is(err, shortlink.ErrInvalidOptions) {
			t.Errorf("Shorten(%+v): %v, want ErrInvalidOptions", o, err)
		}
	}
	for _, cfg := range []shortlink.Config{
		{FlushEvery: -time.Second}, {NegativeTTL: -1}, {RedisTTL: -time.Hour}, {PermanentMaxAge: -1}, {TemporaryMaxAge: -1},
		{LocalEntries: -5}, {SegmentStep: -1}, {CodeLength: 11}, {CodeLength: -1}, {SnowflakeNode: 1024}, {SnowflakeNode: -1},
		{MissLimit: redis_rate.Limit{Rate: -1, Burst: 1, Period: time.Second}}, {CreateLimit: redis_rate.Limit{Rate: 1, Period: time.Second}},
	} {
		cfg.BaseURL = "https://sho.rt"
		if _, err := shortlink.NewService(testenv.NewRedis(t).Client, []*sqlx.DB{db}, cfg); !errors.Is(err, shortlink.ErrConfig) {
			t.Errorf("New(%+v): %v, want ErrConfig", cfg, err)
		}
	}
}

func postRaw(t *testing.T, base, body string) (*http.Response, map[string]any) {
	t.Helper()
	res, err := http.Post(base+"/api/links", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	json.NewDecoder(res.Body).Decode(&out)
	return res, out
}

// countLinks counts the rows of all link tables.
func countLinks(t *testing.T, db *sqlx.DB, tables int) int {
	t.Helper()
	rows := 0
	for i := range tables {
		var n int
		if err := db.Get(&n, fmt.Sprintf("SELECT COUNT(*) FROM links_%03d", i)); err != nil {
			t.Fatal(err)
		}
		rows += n
	}
	return rows
}

// A create request is one JSON object with exactly-named fields, each once,
// and nothing after it; a body over the cap is 413; a 429 says when to retry,
// also to a request whose clientIP is empty (limited by its connection).
func TestCreateRequestBodies(t *testing.T) {
	db := testenv.NewSQL(t)
	s := newServiceOn(t, testenv.NewRedis(t), db, shortlink.Config{TablesPerDB: 4, CreateLimit: redis_rate.PerMinute(2)})
	base := server(t, s)
	ok := `{"url": "https://example.com/"}`
	for body, want := range map[string]int{
		ok + `garbage`: 400,
		ok + ok:        400,
		ok + `{}`:      400,
		ok + `]`:       400,
		`{"url": "https://example.com/", "url": "https://example.com/x"}`: 400,
		`{"URL": "https://example.com/"}`:                                 400,
		`{"url": "https://example.com/", "Max_Visits": 1}`:                400,
		`{"url": "https://example.com/", "bogus": 1}`:                     400,
		`null`: 400, `[]`: 400, `"x"`: 400, ``: 400, `{`: 400, `{}`: 400,
		"{\"url\": \"https://example.com/\xff\"}":                                         400, // invalid UTF-8: encoding/json made it U+FFFD
		`{"url": "https://example.com/", "\u0075rl": "https://example.com/x"}`:            400, // "url" again, escaped
		`{"url": "https://example.com/", "alias": "` + strings.Repeat("a", 17<<10) + `"}`: 413,
		ok + strings.Repeat(" ", 17<<10):                                                  413,
	} {
		if res, out := postRaw(t, base, body); res.StatusCode != want {
			t.Errorf("POST %.80q: %d %v, want %d", body, res.StatusCode, out, want)
		}
	}
	if n := countLinks(t, db, 4); n != 0 {
		t.Fatalf("refused bodies left %d rows", n)
	}
	for i, want := range []int{201, 201, 429} {
		res, out := postRaw(t, base, ok+"\n")
		if res.StatusCode != want {
			t.Fatalf("create %d: %d %v, want %d", i+1, res.StatusCode, out, want)
		}
		if want == 429 {
			if secs, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || secs < 1 || secs > 30 {
				t.Fatalf("429 with Retry-After %q, want 1..30 seconds", res.Header.Get("Retry-After"))
			}
		}
	}
}

// HEAD answers as GET would but is no visit: a link limited to one visit
// survives any number of HEADs, and HEADs count no clicks.
func TestHeadDoesNotConsume(t *testing.T) {
	s := newService(t, testenv.NewRedis(t), shortlink.Config{})
	base := server(t, s)
	_, once := post(t, base, map[string]any{"url": "https://example.com/once", "max_visits": 1}, "1.1.1.1")
	_, plain := post(t, base, map[string]any{"url": "https://example.com/plain"}, "1.1.1.1")
	head := func(code string) *http.Response {
		req, _ := http.NewRequest("HEAD", base+"/"+code, nil)
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	code := once["code"].(string)
	for range 3 {
		if res := head(code); res.StatusCode != 302 || res.Header.Get("Location") != "https://example.com/once" || res.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("HEAD: %d %q %q; want 302 to the link, no-store", res.StatusCode, res.Header.Get("Location"), res.Header.Get("Cache-Control"))
		}
		head(plain["code"].(string))
	}
	if res := get(t, base+"/"+code, "2.2.2.2"); res.StatusCode != 302 {
		t.Fatalf("GET after HEADs: %d, want 302 (HEAD spent the only visit)", res.StatusCode)
	}
	for _, res := range []*http.Response{get(t, base+"/"+code, "2.2.2.2"), head(code)} {
		if res.StatusCode != 410 {
			t.Errorf("%s of a used-up link: %d, want 410", res.Request.Method, res.StatusCode)
		}
	}
	for c, want := range map[string]int64{code: 1, plain["code"].(string): 0} {
		if st, err := s.Stats(context.Background(), c); err != nil || st.Clicks != want {
			t.Errorf("stats of %s: %+v, %v; want %d clicks", c, st, err, want)
		}
	}
}

// A client is limited by what it is, not how its address is spelt: one IPv4
// address in any form, one IPv6 /64 whatever address in it.
func TestRateLimitClientSpellings(t *testing.T) { eachMissMode(t, testRateLimitClientSpellings) }

func testRateLimitClientSpellings(t *testing.T, local bool) {
	ctx := context.Background()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{SharedMissCheck: !local, MissLimit: redis_rate.PerMinute(3), CreateLimit: redis_rate.PerMinute(2)})
	resolve := func(ip string) error {
		_, err := s.ResolveWith(ctx, "nosuchcode", shortlink.ResolveOptions{ClientIP: ip})
		return err
	}
	for _, group := range [][]string{
		{"10.0.0.7", "::ffff:10.0.0.7", "::FFFF:a00:7", "10.0.0.7"},
		{"2001:db8::1", "2001:DB8:0:0:ffff::2", "2001:db8::abcd:3", "2001:db8::4"},
		{"fe80::1%eth0", "fe80::2", "fe80::1", "fe80::3%eth1"},
	} {
		for i, ip := range group {
			err := resolve(ip)
			if i < 3 && !errors.Is(err, shortlink.ErrNotFound) || i == 3 && !errors.Is(err, shortlink.ErrRateLimited) {
				t.Errorf("miss %d from %s (group %v): %v", i+1, ip, group, err)
			}
		}
	}
	if err := resolve("2001:db8:0:1::1"); !errors.Is(err, shortlink.ErrNotFound) {
		t.Errorf("another /64: %v, want ErrNotFound", err)
	}
	for i, ip := range []string{"2001:db8:5::1", "2001:db8:5::2", "2001:db8:5::3"} {
		_, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{ClientIP: ip})
		if i < 2 && err != nil || i == 2 && !errors.Is(err, shortlink.ErrRateLimited) {
			t.Errorf("create %d from %s: %v", i+1, ip, err)
		}
	}
}

// eachMissMode runs a miss-limit test with the budget read from Redis
// before every lookup (Config.SharedMissCheck), and with the local miss filter (the default): within one process
// the limits are the same.
func eachMissMode(t *testing.T, test func(t *testing.T, local bool)) {
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprintf("local-miss-filter=%v", local), func(t *testing.T) { test(t, local) })
	}
}
