package main

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const testKey = "s3cret"

// pageFixture is the example's routes on the test's backends, with one
// link owned by the key's owner, clicked and flushed, and one of another
// owner.
type pageFixture struct {
	svc                          *shortlink.Service
	srv                          *httptest.Server
	clk                          *testenv.Clock
	code, bobs                   string
	hour                         time.Time // of every click
	people, bots                 int64
	visitors                     int64 // distinct User-Agents of people (one client IP)
	sourceMarkup, campaignMarkup string
}

// A click the fixture sends.
type visit struct{ referer, ua, country string }

const (
	iPhone  = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) Mobile/15E148 Safari/604.1"
	desktop = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36"
	tablet  = "Mozilla/5.0 (iPad; CPU OS 17_1 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148"
)

var visits = []visit{
	{"https://news.example/item?id=1", iPhone, "de"},
	{"https://news.example/item?id=2", desktop, "US"},
	{"https://News.Example./other", iPhone, "de"},
	{"https://<script>alert(1)</script>/", desktop, "US"}, // no well-formed host: (invalid)
	{"https://search.example/?q=<b>", tablet, ""},         // only the host is kept
	{"", desktop, "FR"},
	{"https://search.example/", "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "US"},
	{"", "curl/8.4.0", ""},
}

func newPageFixture(t *testing.T) *pageFixture {
	t.Helper()
	ctx := context.Background()
	r, db := testenv.NewRedis(t), testenv.NewSQL(t)
	f := &pageFixture{clk: testenv.NewClock(testenv.Now().Truncate(time.Hour).Add(30 * time.Minute))}
	f.hour = f.clk.Now().Truncate(time.Hour)
	svc, err := shortlink.NewService(r.Client, []*sqlx.DB{db}, shortlink.Config{
		BaseURL: "https://sho.rt", Namespace: r.Namespace, TablesPerDB: 4, FlushEvery: 20 * time.Millisecond,
		Now: f.clk.Now, OnError: func(err error) { t.Errorf("background: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		svc.Close()
		testenv.DeleteKeys(context.Background(), r.Client, "rate:"+r.Namespace+"*") // redis_rate's own prefix
	})
	if err := svc.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	f.srv = httptest.NewServer(routes(svc, testKey))
	t.Cleanup(f.srv.Close)

	// A UTM value is the destination's, so it can carry any text.
	f.sourceMarkup, f.campaignMarkup = `<script>alert(1)</script>`, `"><img src=x onerror=alert(2)>`
	dest := "https://example.org/launch?" + url.Values{"utm_source": {f.sourceMarkup}, "utm_campaign": {f.campaignMarkup}}.Encode()
	res, body := f.do(t, "POST", "/api/links", testKey, `{"url":`+strconv.Quote(dest)+`}`)
	var l shortlink.Link
	if err := json.Unmarshal(body, &l); res.StatusCode != http.StatusCreated || err != nil {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	f.code = l.Code
	bob, err := svc.Shorten(ctx, "https://example.org/bob", shortlink.Options{Owner: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	f.bobs = bob.Code

	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	uas := map[string]bool{}
	for _, v := range visits {
		req, _ := http.NewRequest("GET", f.srv.URL+"/"+f.code, nil)
		req.Header.Set("User-Agent", v.ua)
		if v.referer != "" {
			req.Header.Set("Referer", v.referer)
		}
		if v.country != "" {
			req.Header.Set("X-Country", v.country)
		}
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusFound {
			t.Fatalf("redirect: %d", res.StatusCode)
		}
		if shortlink.Device(v.ua) == shortlink.DeviceBot {
			f.bots++
		} else {
			f.people++
			uas[v.ua] = true
		}
	}
	f.visitors = int64(len(uas))
	testenv.WaitFor(t, "the clicks and visitors flushed", func() bool {
		ps, err := svc.Clicks(ctx, f.code, f.hour, f.hour.Add(time.Hour), time.Hour)
		n, err2 := svc.Uniques(ctx, f.code, f.hour)
		return err == nil && err2 == nil && len(ps) == 1 && ps[0].Clicks == f.people && ps[0].Bots == f.bots && n == f.visitors
	})
	return f
}

// do sends method path with the bearer key (none when "") and returns the
// answer and its body.
func (f *pageFixture) do(t *testing.T, method, path, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

var (
	barRE   = regexp.MustCompile(`<g class="bar" data-start="([^"]*)" data-clicks="(\d+)" data-bots="(\d+)">`)
	yTickRE = regexp.MustCompile(`<text class="y"[^>]*>([^<]*)</text>`)
	rowRE   = regexp.MustCompile(`<tr><td class="v">([^<]*)</td><td class="n">(\d+)</td><td class="n">(\d+)</td></tr>`)
	tableRE = regexp.MustCompile(`(?s)<table id="dim-([a-z_]+)">(.*?)</table>`)
)

// The page of a link: 200 with a policy that forbids scripts, one bar per
// hour holding Clicks' counts, integer y ticks, every breakdown's table
// equal to Breakdown's top 10 over the chart's range, today's uniques;
// forged values (markup in a Referer, in UTM values) only as text.
func TestStatsPage(t *testing.T) {
	ctx := context.Background()
	f := newPageFixture(t)
	from, to := f.hour.Add(-23*time.Hour), f.hour.Add(time.Hour)
	res, body := f.do(t, "GET", "/api/links/"+f.code+"/stats.html?from="+from.Format(time.RFC3339)+"&to="+to.Format(time.RFC3339), testKey, "")
	page := string(body)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("%d %s: %s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	policy := map[string]string{}
	for _, d := range strings.Split(res.Header.Get("Content-Security-Policy"), ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		policy[name] = value
	}
	if policy["default-src"] != "'none'" || policy["script-src"] != "" || strings.Contains(res.Header.Get("Content-Security-Policy"), "unsafe") {
		t.Errorf("Content-Security-Policy %q does not forbid scripts", res.Header.Get("Content-Security-Policy"))
	}

	// No markup from the data: no script, img or b element.
	lower := strings.ToLower(page)
	for _, tag := range []string{"<script", "<img", "<b>"} {
		if strings.Contains(lower, tag) {
			t.Errorf("page holds %s unescaped", tag)
		}
	}
	for _, text := range []string{f.sourceMarkup, f.campaignMarkup} {
		if !strings.Contains(page, htmlText(text)) {
			t.Errorf("page does not show %q as text", text)
		}
	}

	points, err := f.svc.Clicks(ctx, f.code, from, to, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bars := barRE.FindAllStringSubmatch(page, -1)
	if len(bars) != 24 || len(points) != 24 {
		t.Fatalf("%d bars, %d points, want 24 (one per hour)", len(bars), len(points))
	}
	for i, b := range bars {
		p := points[i]
		if b[1] != p.Start.Format(time.RFC3339) || b[2] != strconv.FormatInt(p.Clicks, 10) || b[3] != strconv.FormatInt(p.Bots, 10) {
			t.Errorf("bar %d: %v, want %+v", i, b[1:], p)
		}
	}
	if last := bars[23]; last[2] != strconv.FormatInt(f.people, 10) || last[3] != strconv.FormatInt(f.bots, 10) {
		t.Errorf("this hour's bar: %v, want %d people, %d bots", last[1:], f.people, f.bots)
	}
	ticks := yTickRE.FindAllStringSubmatch(page, -1)
	if len(ticks) < 2 {
		t.Errorf("%d y ticks", len(ticks))
	}
	for _, tk := range ticks {
		if _, err := strconv.ParseInt(tk[1], 10, 64); err != nil {
			t.Errorf("y tick %q is not an integer", tk[1])
		}
	}

	tables := map[string]string{}
	for _, m := range tableRE.FindAllStringSubmatch(page, -1) {
		tables[m[1]] = m[2]
	}
	for _, d := range pageDims {
		want, err := f.svc.Breakdown(ctx, f.code, d.dim, from, to, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []shortlink.Count
		for _, r := range rowRE.FindAllStringSubmatch(tables[string(d.dim)], -1) {
			if strings.ContainsAny(r[1], `<>"'`) {
				t.Errorf("%s: value %q not escaped", d.dim, r[1])
			}
			clicks, _ := strconv.ParseInt(r[2], 10, 64)
			bots, _ := strconv.ParseInt(r[3], 10, 64)
			got = append(got, shortlink.Count{Value: html.UnescapeString(r[1]), Clicks: clicks, Bots: bots})
		}
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s table %+v, want Breakdown's %+v", d.dim, got, want)
		}
	}
	// What Breakdown said, spelt out once.
	for dim, want := range map[string]string{
		"referrer":     `<td class="v">news.example</td><td class="n">3</td><td class="n">0</td>`,
		"utm_source":   `<td class="v">&lt;script&gt;alert(1)&lt;/script&gt;</td><td class="n">6</td><td class="n">2</td>`,
		"utm_campaign": `<td class="v">&#34;&gt;&lt;img src=x onerror=alert(2)&gt;</td><td class="n">6</td><td class="n">2</td>`,
		"device":       `<td class="v">desktop</td><td class="n">3</td><td class="n">0</td>`,
	} {
		if !strings.Contains(tables[dim], want) {
			t.Errorf("%s table lacks %s:\n%s", dim, want, tables[dim])
		}
	}
	if !strings.Contains(tables["referrer"], `<td class="v">(invalid)</td><td class="n">1</td>`) {
		t.Errorf("the forged Referer is not (invalid):\n%s", tables["referrer"])
	}
	if want := `<strong>` + strconv.FormatInt(f.visitors, 10) + `</strong>`; !strings.Contains(page, `<p id="uniques">`) ||
		!strings.Contains(page[strings.Index(page, `<p id="uniques">`):], want) {
		t.Errorf("uniques: want %s in %s", want, page)
	}
}

// htmlText is html/template's escaping of text in an element.
func htmlText(s string) string {
	return strings.NewReplacer(`&`, "&amp;", `<`, "&lt;", `>`, "&gt;", `"`, "&#34;", `'`, "&#39;", "+", "&#43;").Replace(s)
}

// The default range is the JSON route's: the 24 steps before now, one bar
// per step, hours or (?step=24h) UTC days.
func TestStatsPageDefaults(t *testing.T) {
	ctx := context.Background()
	f := newPageFixture(t)
	now := f.clk.Now()
	for query, step := range map[string]time.Duration{"": time.Hour, "?step=1h": time.Hour, "?step=24h": 24 * time.Hour} {
		res, body := f.do(t, "GET", "/api/links/"+f.code+"/stats.html"+query, testKey, "")
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%q: %d %s", query, res.StatusCode, body)
		}
		points, err := f.svc.Clicks(ctx, f.code, now.Add(-24*step), now, step)
		if err != nil {
			t.Fatal(err)
		}
		bars := barRE.FindAllStringSubmatch(string(body), -1)
		if len(bars) != len(points) || len(bars) != 25 {
			t.Fatalf("%q: %d bars, want %d (one per step)", query, len(bars), len(points))
		}
		last := bars[len(bars)-1]
		if last[1] != now.UTC().Truncate(step).Format(time.RFC3339) || last[2] != strconv.FormatInt(f.people, 10) || last[3] != strconv.FormatInt(f.bots, 10) {
			t.Errorf("%q: last bar %v", query, last[1:])
		}
	}
}

// The page answers as the JSON route: 401 without the key or with another,
// 404 for another owner's link and for no link, 400 for a bad or repeated
// parameter — with the JSON route's very status and body — and 400 for a
// parameter of the route's that the page does not take.
func TestStatsPageRefusals(t *testing.T) {
	f := newPageFixture(t)
	for _, c := range []struct {
		code, key, query string
		status           int
	}{
		{f.code, "", "", http.StatusUnauthorized},
		{f.code, "wrong", "", http.StatusUnauthorized},
		{f.bobs, testKey, "", http.StatusNotFound},
		{"nosuchcode", testKey, "", http.StatusNotFound},
		{f.code, testKey, "?step=2h", http.StatusBadRequest},
		{f.code, testKey, "?step=", http.StatusBadRequest},
		{f.code, testKey, "?step=1h&step=24h", http.StatusBadRequest},
		{f.code, testKey, "?from=yesterday", http.StatusBadRequest},
		{f.code, testKey, "?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", http.StatusBadRequest},
		{f.code, testKey, "?to=2026-13-01T00:00:00Z", http.StatusBadRequest},
		{f.code, testKey, "?from=2000-01-01T00:00:00Z&to=2026-01-01T00:00:00Z", http.StatusBadRequest},
	} {
		res, body := f.do(t, "GET", "/api/links/"+c.code+"/stats.html"+c.query, c.key, "")
		jres, jbody := f.do(t, "GET", "/api/links/"+c.code+"/stats"+c.query, c.key, "")
		if res.StatusCode != c.status || jres.StatusCode != c.status || string(body) != string(jbody) {
			t.Errorf("%s %q key %q: page %d %s, JSON route %d %s, want both %d", c.code, c.query, c.key, res.StatusCode, body, jres.StatusCode, jbody, c.status)
		}
		if res.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %q: an error as %q", c.code, c.query, res.Header.Get("Content-Type"))
		}
	}
	for _, q := range []string{"?dim=referrer", "?n=5", "?key=" + testKey} {
		if res, body := f.do(t, "GET", "/api/links/"+f.code+"/stats.html"+q, testKey, ""); res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", q, res.StatusCode, body)
		}
	}
	if res, body := f.do(t, "GET", "/api/links/"+f.code+"/stats.html?key="+testKey, "", ""); res.StatusCode == http.StatusOK {
		t.Errorf("the key in the URL is taken: %s", body)
	}
}
