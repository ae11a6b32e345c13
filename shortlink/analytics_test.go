package shortlink_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/obs/obstest"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

// A visitor the exactness test sends, and what the block must record of it.
type fakeVisitor struct {
	ua, device string
}

var fakeVisitors = []fakeVisitor{
	{"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36", shortlink.DeviceDesktop},
	{"Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1) AppleWebKit/605.1.15 Version/17.1 Safari/605.1.15", shortlink.DeviceDesktop},
	{"Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) Mobile/15E148 Safari/604.1", shortlink.DeviceMobile},
	{"Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 Chrome/120.0 Mobile Safari/537.36", shortlink.DeviceMobile},
	{"Mozilla/5.0 (iPad; CPU OS 17_1 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148", shortlink.DeviceTablet},
	{"Mozilla/5.0 (Linux; Android 13; SM-X700) AppleWebKit/537.36 Chrome/120.0 Safari/537.36", shortlink.DeviceTablet},
	{"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", shortlink.DeviceBot},
	{"curl/8.4.0", shortlink.DeviceBot},
	{"facebookexternalhit/1.1", shortlink.DeviceBot},
	{"", shortlink.DeviceOther},
	{"SomethingElse/1.0", shortlink.DeviceOther},
}

// referrers as sent, and the host recorded: case, a trailing dot, a port
// and userinfo do not make another referrer.
var fakeReferrers = [][2]string{
	{"", shortlink.ValueDirect},
	{"https://Example.COM/page", "example.com"},
	{"https://example.com./other?q=1", "example.com"},
	{"http://user@EXAMPLE.com:8080/", "example.com"},
	{"https://news.ycombinator.com/item?id=1", "news.ycombinator.com"},
	{"https://t.co/abc", "t.co"},
	{"android-app://com.slack/", "com.slack"},
	{"not a url", shortlink.ValueInvalid},
	{"https://bad_host.example/", shortlink.ValueInvalid},
}

var fakeCountries = [][2]string{
	{"de", "DE"}, {"US", "US"}, {"Fr", "FR"}, {"", shortlink.ValueUnknown}, {"T1", shortlink.ValueUnknown},
	{"USA", shortlink.ValueUnknown}, {"ü1", shortlink.ValueUnknown},
}

// modelKey is one rollup cell of the test's model.
type modelKey struct {
	code string
	hour int64
	dim  shortlink.Dimension
	val  string
	bot  bool
}

// model counts what the redirects sent, as the block must store it.
type model struct {
	mu       sync.Mutex
	cells    map[modelKey]int64
	visitors map[string]map[string]bool // code/day → visitor
}

func (m *model) add(code string, hour time.Time, vals map[shortlink.Dimension]string, bot bool, visitor string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cells[modelKey{code, hour.Unix(), "", "", bot}]++
	for d, v := range vals {
		m.cells[modelKey{code, hour.Unix(), d, v, bot}]++
	}
	if !bot {
		k := code + "/" + hour.Truncate(24*time.Hour).Format(time.DateOnly)
		if m.visitors[k] == nil {
			m.visitors[k] = map[string]bool{}
		}
		m.visitors[k][visitor] = true
	}
}

var allDims = []shortlink.Dimension{shortlink.DimReferrer, shortlink.DimDevice, shortlink.DimCountry,
	shortlink.DimUTMSource, shortlink.DimUTMMedium, shortlink.DimUTMCampaign}

// TestAnalyticsExactness: 100,000 redirects from 8 goroutines through the
// handlers of two Services (two processes sharing Redis and SQL), with
// random referrers, User-Agents, countries and client IPs, over three
// hours that cross a UTC midnight; between the hours, flushes whose
// commits succeed but whose replies are lost, and a last flush at
// Shutdown. Every stored count — per link, hour, day, dimension, value,
// people and bots apart — equals the model's: no click lost, none counted
// twice. Uniques are within HyperLogLog's error of the model's visitors.
// On a single Redis and on the cluster.
func TestAnalyticsExactness(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		db := testenv.NewSQL(t)
		clk := testenv.NewClock(testenv.Now().Truncate(24 * time.Hour).Add(22*time.Hour + 10*time.Minute))
		cfg := shortlink.Config{FlushEvery: time.Hour, Now: clk.Now, TablesPerDB: 8}
		a, b := newServiceOn(t, r, db, cfg), newServiceOn(t, r, db, cfg)
		targets := []string{"https://example.org/a", "https://example.org/b?utm_source=news&utm_medium=email&utm_campaign=launch",
			"https://example.org/c?utm_source=" + strings.Repeat("x", 100), "https://example.org/d?utm_medium=Social"}
		utms := [][3]string{{shortlink.ValueNone, shortlink.ValueNone, shortlink.ValueNone}, {"news", "email", "launch"},
			{strings.Repeat("x", shortlink.MaxValueLen), shortlink.ValueNone, shortlink.ValueNone}, {shortlink.ValueNone, "Social", shortlink.ValueNone}}
		var codes []string
		for i := range 12 {
			l, err := a.Shorten(ctx, targets[i%len(targets)], shortlink.Options{})
			if err != nil {
				t.Fatal(err)
			}
			codes = append(codes, l.Code)
		}
		m := &model{cells: map[modelKey]int64{}, visitors: map[string]map[string]bool{}}
		handlers := []http.Handler{a.RedirectHandler(testIP), b.RedirectHandler(testIP)}
		const goroutines, perHour, hours = 8, 4200, 3 // 8 × 4,200 × 3 = 100,800 redirects
		start := clk.Now().Truncate(time.Hour)
		for h := range hours {
			clk.Set(start.Add(time.Duration(h)*time.Hour + time.Duration(h*7)*time.Minute))
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					rnd := rand.New(rand.NewPCG(uint64(h), uint64(g)))
					for range perHour {
						i := rnd.IntN(len(codes))
						v, ref, c := fakeVisitors[rnd.IntN(len(fakeVisitors))], fakeReferrers[rnd.IntN(len(fakeReferrers))], fakeCountries[rnd.IntN(len(fakeCountries))]
						ip := fmt.Sprintf("10.0.%d.%d", rnd.IntN(4), rnd.IntN(250))
						req := httptest.NewRequest("GET", "/"+codes[i], nil)
						req.Header.Set("X-Test-IP", ip)
						req.Header.Set("User-Agent", v.ua)
						req.Header.Set("Referer", ref[0])
						req.Header.Set("CF-IPCountry", c[0])
						w := httptest.NewRecorder()
						handlers[rnd.IntN(2)].ServeHTTP(w, req)
						if w.Code != http.StatusFound {
							t.Errorf("redirect: %d", w.Code)
							return
						}
						u := utms[i%len(targets)]
						m.add(codes[i], clk.Now().Truncate(time.Hour), map[shortlink.Dimension]string{
							shortlink.DimReferrer: ref[1], shortlink.DimDevice: v.device, shortlink.DimCountry: c[1],
							shortlink.DimUTMSource: u[0], shortlink.DimUTMMedium: u[1], shortlink.DimUTMCampaign: u[2],
						}, v.device == shortlink.DeviceBot, ip+"|"+v.ua)
					}
				})
			}
			wg.Wait()
			if h == hours-1 {
				break // the rest is flushed by Shutdown
			}
			// A flush whose first three parts commit but lose their reply: kept
			// whole, tried again at the next flush, and not counted twice.
			a.LoseAnalyticsReplies(3)
			if err := a.FlushAnalytics(ctx); err == nil || !a.AnalyticsPending() {
				t.Fatalf("a flush with lost replies: %v, pending %v", err, a.AnalyticsPending())
			}
			if err := b.FlushAnalytics(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range []*shortlink.Service{a, b} {
			if err := s.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got := a.AnalyticsStats().PartsReplayed; got != 2*3 {
			t.Errorf("parts found already applied: %d, want 6 (3 lost replies in each of 2 flushes)", got)
		}
		if st := a.AnalyticsStats(); st.Clicks+b.AnalyticsStats().Clicks != goroutines*perHour*hours || st.Overflowed != 0 {
			t.Errorf("recorded %d+%d clicks, %d overflowed", st.Clicks, b.AnalyticsStats().Clicks, st.Overflowed)
		}

		// Read back through a third Service: what is stored, not what is held.
		q := newServiceOn(t, r, db, cfg)
		want := map[modelKey]int64{}
		for k, n := range m.cells {
			want[k] = n
			day := time.Unix(k.hour, 0).Truncate(24 * time.Hour).Unix()
			want[modelKey{k.code, -day, k.dim, k.val, k.bot}] += n // a day's cell, negated so it is a key of its own
		}
		got := map[modelKey]int64{}
		record := func(code string, bucket int64, dim shortlink.Dimension, val string, clicks, bots int64) {
			if clicks != 0 {
				got[modelKey{code, bucket, dim, val, false}] += clicks
			}
			if bots != 0 {
				got[modelKey{code, bucket, dim, val, true}] += bots
			}
		}
		first := start.Truncate(24 * time.Hour)
		for _, code := range codes {
			series, err := q.Clicks(ctx, code, start, start.Add(hours*time.Hour), time.Hour)
			if err != nil || len(series) != hours {
				t.Fatalf("Clicks: %d points, %v", len(series), err)
			}
			for _, p := range series {
				record(code, p.Start.Unix(), "", "", p.Clicks, p.Bots)
			}
			days, err := q.Clicks(ctx, code, first, first.Add(48*time.Hour), 24*time.Hour)
			if err != nil || len(days) != 2 {
				t.Fatalf("daily Clicks: %d points, %v", len(days), err)
			}
			for _, p := range days {
				record(code, -p.Start.Unix(), "", "", p.Clicks, p.Bots)
			}
			for _, d := range allDims {
				for h := range hours {
					from := start.Add(time.Duration(h) * time.Hour)
					cs, err := q.Breakdown(ctx, code, d, from, from.Add(time.Hour), shortlink.MaxBreakdown)
					if err != nil {
						t.Fatal(err)
					}
					for _, c := range cs {
						record(code, from.Unix(), d, c.Value, c.Clicks, c.Bots)
					}
				}
				for day := range 2 {
					from := first.Add(time.Duration(day) * 24 * time.Hour)
					cs, err := q.Breakdown(ctx, code, d, from, from.Add(24*time.Hour), shortlink.MaxBreakdown)
					if err != nil {
						t.Fatal(err)
					}
					for _, c := range cs {
						record(code, -from.Unix(), d, c.Value, c.Clicks, c.Bots)
					}
				}
			}
		}
		obstest.Expect(t, got, want) // stored against the model
		// The click counter of Stats agrees with the rollups' totals.
		for _, code := range codes {
			st, err := q.Stats(ctx, code)
			var sum int64
			for k, n := range m.cells {
				if k.code == code && k.dim == "" {
					sum += n
				}
			}
			if err != nil || st.Clicks != sum {
				t.Errorf("%s: Stats %d clicks, %v; model %d", code, st.Clicks, err, sum)
			}
		}
		for k, vs := range m.visitors {
			code, day, _ := strings.Cut(k, "/")
			d, _ := time.Parse(time.DateOnly, day)
			n, err := q.Uniques(ctx, code, d)
			if err != nil {
				t.Fatal(err)
			}
			if diff := float64(n) - float64(len(vs)); diff < -0.05*float64(len(vs))-2 || diff > 0.05*float64(len(vs))+2 {
				t.Errorf("%s: %d uniques, model %d", k, n, len(vs))
			}
		}
	})
}

// The classifier's classes, and a country code's forms.
func TestAnalyticsDeviceAndCountry(t *testing.T) {
	for _, v := range fakeVisitors {
		if got := shortlink.Device(v.ua); got != v.device {
			t.Errorf("Device(%q) = %s, want %s", v.ua, got, v.device)
		}
	}
	if got := shortlink.Device(strings.Repeat("a", 1<<20) + "bot"); got != shortlink.DeviceOther {
		t.Errorf("a mark past the first 512 bytes is read: %s", got)
	}
	for _, c := range fakeCountries {
		if got := shortlink.CountryCode(c[0]); got != c[1] {
			t.Errorf("CountryCode(%q) = %q, want %q", c[0], got, c[1])
		}
	}
}

// analyticsService is a Service whose flushes the test makes, with one link.
func analyticsService(t *testing.T, cfg shortlink.Config) (*shortlink.Service, *testenv.Clock, string) {
	t.Helper()
	clk := newClock()
	cfg.FlushEvery, cfg.Now = time.Hour, clk.Now
	s := newService(t, testenv.NewRedis(t), cfg)
	l, err := s.Shorten(context.Background(), "https://example.com/", shortlink.Options{Alias: "stats-link", Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	return s, clk, l.Code
}

func redirect(t *testing.T, h http.Handler, code string, header ...string) {
	t.Helper()
	req := httptest.NewRequest("GET", "/"+code, nil)
	for i := 0; i < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusFound {
		t.Fatalf("redirect: %d", w.Code)
	}
}

// Forged headers: a 1 MB Referer is one invalid referrer, 10,000 distinct
// referrers on one link in one hour keep at most AnalyticsValues of them
// in memory and count the rest as (other), and HEAD counts nothing.
func TestAnalyticsForgedHeaders(t *testing.T) {
	ctx := context.Background()
	s, clk, code := analyticsService(t, shortlink.Config{AnalyticsValues: 50})
	h := s.RedirectHandler(testIP)
	redirect(t, h, code, "Referer", "https://"+strings.Repeat("a", 1<<20)+".example/")
	redirect(t, h, code, "Referer", "https://x.example/"+strings.Repeat("p", 1<<20))
	for i := range 10_000 {
		redirect(t, h, code, "Referer", fmt.Sprintf("https://h%d.Example/", i), "X-Test-IP", "10.1.1.1")
	}
	head := httptest.NewRequest("HEAD", "/"+code, nil)
	h.ServeHTTP(httptest.NewRecorder(), head)
	hours, values := s.AnalyticsMemory()
	// 50 referrers and (other); one value of each other dimension.
	if hours != 1 || values != 51+5 {
		t.Fatalf("memory: %d hours, %d values; want 1 and 56", hours, values)
	}
	if st := s.AnalyticsStats(); st.Clicks != 10_002 || st.Overflowed != 10_002-50 {
		t.Fatalf("stats %+v", st)
	}
	if err := s.FlushAnalytics(ctx); err != nil {
		t.Fatal(err)
	}
	from := clk.Now().Truncate(time.Hour)
	cs, err := s.Breakdown(ctx, code, shortlink.DimReferrer, from, from.Add(time.Hour), 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 3 || cs[0] != (shortlink.Count{Value: shortlink.ValueOther, Clicks: 10_002 - 50}) || cs[1].Clicks != 1 {
		t.Fatalf("breakdown %+v", cs)
	}
	if ps, err := s.Clicks(ctx, code, from, from.Add(time.Hour), time.Hour); err != nil || len(ps) != 1 || ps[0].Clicks != 10_002 {
		t.Fatalf("Clicks %+v, %v", ps, err)
	}
	// The next hour starts afresh.
	clk.Add(time.Hour)
	redirect(t, h, code, "Referer", "https://h1.example/")
	if err := s.FlushAnalytics(ctx); err != nil {
		t.Fatal(err)
	}
	cs, err = s.Breakdown(ctx, code, shortlink.DimReferrer, from.Add(time.Hour), from.Add(2*time.Hour), 10)
	if err != nil || len(cs) != 1 || cs[0] != (shortlink.Count{Value: "h1.example", Clicks: 1}) {
		t.Fatalf("next hour %+v, %v", cs, err)
	}
	if n, err := s.Uniques(ctx, code, from); err != nil || n != 2 {
		t.Fatalf("uniques %d, %v; want 2 (10.1.1.1, and httptest's 192.0.2.1 for the requests without X-Test-IP)", n, err)
	}
}

// Every bad query argument is refused with a clear error.
func TestAnalyticsQueryArguments(t *testing.T) {
	ctx := context.Background()
	s, clk, code := analyticsService(t, shortlink.Config{})
	now := clk.Now()
	h, d := time.Hour, 24*time.Hour
	for _, c := range []struct {
		name     string
		code     string
		from, to time.Time
		step     time.Duration
		want     error
	}{
		{"unknown code", "nosuchcode", now, now.Add(h), h, shortlink.ErrNotFound},
		{"malformed code", "a/b", now, now.Add(h), h, shortlink.ErrNotFound},
		{"from after to", code, now.Add(h), now, h, shortlink.ErrInvalidOptions},
		{"zero from", code, time.Time{}, now, h, shortlink.ErrInvalidOptions},
		{"zero to", code, now, time.Time{}, h, shortlink.ErrInvalidOptions},
		{"step 2h", code, now, now.Add(h), 2 * h, shortlink.ErrInvalidOptions},
		{"step 0", code, now, now.Add(h), 0, shortlink.ErrInvalidOptions},
		{"too many hours", code, now, now.Add((shortlink.MaxPoints + 1) * h), h, shortlink.ErrInvalidOptions},
		{"too many days", code, now, now.Add((shortlink.MaxPoints + 1) * d), d, shortlink.ErrInvalidOptions},
		// calendar: the widest range there is, refused before any server is asked
		{"ten thousand years", code, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), d, shortlink.ErrInvalidOptions},
	} {
		if _, err := s.Clicks(ctx, c.code, c.from, c.to, c.step); !errors.Is(err, c.want) {
			t.Errorf("Clicks, %s: %v, want %v", c.name, err, c.want)
		}
	}
	if ps, err := s.Clicks(ctx, code, now, now.Add(shortlink.MaxPoints*h-h), h); err != nil || len(ps) != shortlink.MaxPoints {
		t.Errorf("the longest series: %d points, %v", len(ps), err)
	}
	for _, c := range []struct {
		name string
		code string
		dim  shortlink.Dimension
		n    int
		want error
	}{
		{"unknown code", "nosuchcode", shortlink.DimReferrer, 10, shortlink.ErrNotFound},
		{"unknown dimension", code, "browser", 10, shortlink.ErrInvalidOptions},
		{"n 0", code, shortlink.DimReferrer, 0, shortlink.ErrInvalidOptions},
		{"n too large", code, shortlink.DimReferrer, shortlink.MaxBreakdown + 1, shortlink.ErrInvalidOptions},
	} {
		if _, err := s.Breakdown(ctx, c.code, c.dim, now, now.Add(h), c.n); !errors.Is(err, c.want) {
			t.Errorf("Breakdown, %s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := s.Breakdown(ctx, code, shortlink.DimCountry, now.Add(h), now, 5); !errors.Is(err, shortlink.ErrInvalidOptions) {
		t.Errorf("Breakdown from after to: %v", err)
	}
	// calendar: the widest range there is, refused before any server is asked
	if _, err := s.Breakdown(ctx, code, shortlink.DimCountry, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), 5); !errors.Is(err, shortlink.ErrInvalidOptions) {
		t.Errorf("Breakdown over ten thousand years: %v", err)
	}
	if _, err := s.Uniques(ctx, code, time.Time{}); !errors.Is(err, shortlink.ErrInvalidOptions) {
		t.Errorf("Uniques of no day: %v", err)
	}
	if _, err := s.Uniques(ctx, "nosuchcode", now); !errors.Is(err, shortlink.ErrNotFound) {
		t.Errorf("Uniques of an unknown code: %v", err)
	}
	if st := s.AnalyticsStats(); st.Clicks != 0 {
		t.Errorf("queries recorded clicks: %+v", st)
	}
}

// NoAnalytics records nothing; Stats still counts clicks.
func TestAnalyticsOff(t *testing.T) {
	ctx := context.Background()
	s, clk, code := analyticsService(t, shortlink.Config{NoAnalytics: true})
	redirect(t, s.RedirectHandler(testIP), code, "Referer", "https://a.example/")
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Stats(ctx, code); err != nil || st.Clicks != 1 {
		t.Fatalf("Stats %+v, %v", st, err)
	}
	from := clk.Now().Truncate(time.Hour)
	if ps, err := s.Clicks(ctx, code, from, from.Add(time.Hour), time.Hour); err != nil || len(ps) != 1 || ps[0].Clicks != 0 {
		t.Fatalf("Clicks with analytics off: %+v, %v", ps, err)
	}
	if st := s.AnalyticsStats(); st != (shortlink.AnalyticsStats{}) {
		t.Fatalf("stats %+v", st)
	}
}

// Uniques live in the link's hash slot, on a single Redis and a cluster;
// a bot is no visitor, and a visitor seen again is not counted again,
// also when a flush is retried.
func TestAnalyticsUniques(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		clk := newClock()
		s := newService(t, r, shortlink.Config{FlushEvery: time.Hour, Now: clk.Now})
		l, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{})
		if err != nil {
			t.Fatal(err)
		}
		h := s.RedirectHandler(testIP)
		for i := range 30 {
			redirect(t, h, l.Code, "X-Test-IP", fmt.Sprintf("10.0.0.%d", i%10), "User-Agent", "Mozilla/5.0 (X11; Linux x86_64)")
			redirect(t, h, l.Code, "X-Test-IP", "10.0.0.99", "User-Agent", "Googlebot/2.1")
		}
		s.LoseAnalyticsReplies(1)
		if err := s.FlushAnalytics(ctx); err == nil {
			t.Fatal("a lost reply went unnoticed")
		}
		if err := s.FlushAnalytics(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Uniques(ctx, l.Code, clk.Now()); err != nil || n != 10 {
			t.Fatalf("uniques %d, %v; want 10", n, err)
		}
		if n, err := s.Uniques(ctx, l.Code, clk.Now().Add(24*time.Hour)); err != nil || n != 0 {
			t.Fatalf("next day's uniques %d, %v", n, err)
		}
	})
}

// A link's uniques key is in the slot of its other keys, and each day has
// a key of its own.
func TestAnalyticsUniquesKeySlot(t *testing.T) {
	s, clk, code := analyticsService(t, shortlink.Config{})
	day := clk.Now()
	if a, b := keys.Slot(s.UniquesKey(code, day)), keys.Slot(s.VisitsKey(code)); a != b {
		t.Fatalf("uniques key in slot %d, visit counter in %d", a, b)
	}
	if s.UniquesKey(code, day) == s.UniquesKey(code, day.Add(24*time.Hour)) || s.UniquesKey(code, day) != s.UniquesKey(code, day.Truncate(24*time.Hour)) {
		t.Fatal("one key per UTC day")
	}
}

// Past 10,000 new visitors of one link and day between flushes, a visitor
// is not added to the uniques, and counted as dropped; the click still is.
func TestAnalyticsVisitorsBounded(t *testing.T) {
	ctx := context.Background()
	s, clk, code := analyticsService(t, shortlink.Config{})
	r := httptest.NewRequest("GET", "/"+code, nil)
	for i := range 10_001 {
		s.RecordClick(code, "https://example.com/", r, fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255))
	}
	if st := s.AnalyticsStats(); st.Clicks != 10_001 || st.VisitorsDropped != 1 {
		t.Fatalf("stats %+v", st)
	}
	if err := s.FlushAnalytics(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Uniques(ctx, code, clk.Now()); err != nil || n < 9_800 || n > 10_200 {
		t.Fatalf("uniques %d, %v; want about 10,000", n, err)
	}
}

// Deleting a link deletes its rollups: a link made again under its alias
// starts from nothing, and so do the counts not yet flushed.
func TestAnalyticsDeletedWithLink(t *testing.T) {
	ctx := context.Background()
	s, clk, code := analyticsService(t, shortlink.Config{})
	h := s.RedirectHandler(testIP)
	redirect(t, h, code)
	if err := s.FlushAnalytics(ctx); err != nil {
		t.Fatal(err)
	}
	redirect(t, h, code) // counted, not flushed
	if err := s.Delete(ctx, code); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Clicks(ctx, code, clk.Now(), clk.Now().Add(time.Hour), time.Hour); !errors.Is(err, shortlink.ErrNotFound) {
		t.Fatalf("Clicks of a deleted link: %v", err)
	}
	if _, err := s.Shorten(ctx, "https://example.com/again", shortlink.Options{Alias: code}); err != nil {
		t.Fatal(err)
	}
	if err := s.FlushAnalytics(ctx); err != nil {
		t.Fatal(err)
	}
	from := clk.Now().Truncate(time.Hour)
	if ps, err := s.Clicks(ctx, code, from, from.Add(time.Hour), time.Hour); err != nil || ps[0].Clicks+ps[0].Bots != 0 {
		t.Fatalf("the new link's clicks: %+v, %v", ps, err)
	}
}
