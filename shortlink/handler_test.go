package shortlink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

// noFollow is a client that reports redirects instead of following them.
var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func post(t *testing.T, base string, body any, ip string) (*http.Response, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", base+"/api/links", bytes.NewReader(b))
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
func TestRateLimits(t *testing.T) {
	s := newService(t, testenv.NewRedis(t), shortlink.Config{CreateLimit: redis_rate.PerMinute(5), MissLimit: redis_rate.PerMinute(3)})
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
	if res := get(t, base+"/"+code, "10.0.0.3"); res.StatusCode != 302 {
		t.Fatalf("a hit from the walking IP: %d, want 302 (hits cost no budget)", res.StatusCode)
	}
	if res := get(t, base+"/walky", "10.0.0.4"); res.StatusCode != 404 {
		t.Fatalf("miss from a fresh IP: %d, want 404", res.StatusCode)
	}
}
