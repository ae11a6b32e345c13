package shortlink_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

// redirectTo asks h for path on host and returns the status and Location.
func redirectTo(h http.Handler, host, path string) (int, string) {
	req := httptest.NewRequest(http.MethodGet, "http://"+host+path, nil)
	req.Host = host
	req.RemoteAddr = "192.0.2.7:1234"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code, w.Header().Get("Location")
}

func TestDomainsSameCodeTwoLinks(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		db := testenv.NewSQL(t)
		clock := newClock()
		s := newServiceOn(t, r, db, shortlink.Config{TablesPerDB: 4, Domains: []string{"Go.Example"}, FlushEvery: time.Hour, Now: clock.Now})
		alias, owner := "promo", "owner-"+r.Namespace // a fresh database per test
		a, err := s.Shorten(ctx, "https://example.com/a", shortlink.Options{Alias: alias, Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Shorten(ctx, "https://example.com/b", shortlink.Options{Alias: alias, Domain: "GO.example", Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		if a.Domain != "" || b.Domain != "go.example" || b.Code != alias {
			t.Fatalf("links %+v and %+v", a, b)
		}
		if _, err := s.Shorten(ctx, "https://example.com/c", shortlink.Options{Alias: alias, Domain: "go.example"}); !errors.Is(err, shortlink.ErrAliasTaken) {
			t.Fatalf("the alias again on go.example: %v, want ErrAliasTaken", err)
		}
		bKey := s.Key("go.example", alias)
		if !regexp.MustCompile(`^`+alias+`~[0-9a-f]{8}$`).MatchString(bKey) || s.Key("", alias) != alias || s.Key("SHO.RT", alias) != alias {
			t.Fatalf("keys %q, %q, %q", bKey, s.Key("", alias), s.Key("SHO.RT", alias))
		}
		if got, want := s.LinkURL(b), "https://go.example/"+alias; got != want || s.ShortURL(bKey) != want {
			t.Fatalf("LinkURL %s, ShortURL(key) %s, want %s", got, s.ShortURL(bKey), want)
		}
		if got := s.LinkURL(a); got != "https://sho.rt/"+alias {
			t.Fatalf("default LinkURL %s", got)
		}
		// Stored under the key; the default domain's row under the bare code.
		var codes []string
		for i := range 4 {
			var c []string
			if err := db.Select(&c, "SELECT code FROM links_00"+string(rune('0'+i))+" WHERE code LIKE ?", alias+"%"); err != nil {
				t.Fatal(err)
			}
			codes = append(codes, c...)
		}
		if len(codes) != 2 || !(codes[0] == alias && codes[1] == bKey || codes[1] == alias && codes[0] == bKey) {
			t.Fatalf("stored codes %q, want %q and %q", codes, alias, bKey)
		}

		for key, want := range map[string]string{alias: a.URL, bKey: b.URL} {
			got, err := s.Resolve(ctx, key)
			if err != nil || got.URL != want {
				t.Fatalf("Resolve(%q) = %+v, %v; want %s", key, got, err, want)
			}
		}
		got, _ := s.Resolve(ctx, bKey)
		if got.Code != alias || got.Domain != "go.example" {
			t.Fatalf("resolved %+v", got)
		}
		h := s.RedirectHandler(nil)
		for _, c := range []struct{ host, path, want string }{
			{"GO.EXAMPLE:8443", "/" + alias, b.URL},
			{"go.example.", "/" + alias, b.URL},
			{"Sho.RT:443", "/" + alias, a.URL},
		} {
			if code, loc := redirectTo(h, c.host, c.path); code != http.StatusFound || loc != c.want {
				t.Errorf("%s%s: %d %q, want 302 %s", c.host, c.path, code, loc, c.want)
			}
		}
		for _, c := range []struct{ host, path string }{{"other.example", "/" + alias}, {"sho.rt", "/" + bKey}, {"localhost", "/" + alias}} {
			if code, _ := redirectTo(h, c.host, c.path); code != http.StatusNotFound {
				t.Errorf("%s%s: %d, want 404", c.host, c.path, code)
			}
		}
		// a: Resolve, then sho.rt twice (a and Sho.RT:443). b: 2 Resolves, 2 redirects.
		for key, want := range map[string]int64{alias: 2, bKey: 4} {
			st, err := s.Stats(ctx, key)
			if err != nil || st.Clicks != want || st.Code != alias {
				t.Fatalf("Stats(%q) = %+v, %v; want %d clicks", key, st, err, want)
			}
		}

		clock.Add(time.Second)
		if _, err := s.Update(ctx, bKey, shortlink.Update{URL: new("https://example.com/b2"), Actor: owner}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Resolve(ctx, alias); err != nil || got.URL != a.URL {
			t.Fatalf("default link after the other's edit: %+v, %v", got, err)
		}
		if code, loc := redirectTo(h, "go.example", "/"+alias); code != http.StatusFound || loc != "https://example.com/b2" {
			t.Fatalf("edited link: %d %q", code, loc)
		}
		revs, err := s.History(ctx, bKey, shortlink.HistoryOptions{})
		if err != nil || len(revs) != 1 || revs[0].Code != alias || revs[0].Domain != "go.example" {
			t.Fatalf("History(b) = %+v, %v", revs, err)
		}
		if revs, err := s.History(ctx, alias, shortlink.HistoryOptions{}); err != nil || len(revs) != 0 {
			t.Fatalf("History(a) = %+v, %v; want none", revs, err)
		}

		page, _, err := s.List(ctx, owner, shortlink.ListFilter{}, "", 10)
		if err != nil || len(page) != 2 {
			t.Fatalf("List = %d links, %v", len(page), err)
		}
		domains := map[string]string{}
		for _, l := range page {
			domains[l.Domain] = l.URL
		}
		if domains[""] != a.URL || domains["go.example"] != "https://example.com/b2" {
			t.Fatalf("List by domain %q", domains)
		}

		if err := s.Delete(ctx, bKey); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Resolve(ctx, bKey); !errors.Is(err, shortlink.ErrNotFound) {
			t.Fatalf("deleted link resolves: %v", err)
		}
		if got, err := s.Resolve(ctx, alias); err != nil || got.URL != a.URL {
			t.Fatalf("default link after the other's delete: %+v, %v", got, err)
		}
		if st, err := s.Stats(ctx, alias); err != nil || st.Clicks != 4 {
			t.Fatalf("default link's stats after the other's delete: %+v, %v", st, err)
		}
	})
}

func TestDomainsAPI(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	s := newService(t, r, shortlink.Config{Domains: []string{"go.example"}})
	api := s.APIHandler(func(*http.Request) (string, bool) { return "api-" + r.Namespace, true }, nil)
	do := func(method, path, body string) (int, string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.RemoteAddr = "192.0.2.8:1"
		w := httptest.NewRecorder()
		api.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	code, body := do("POST", "/api/links", `{"url": "https://example.com/x", "domain": "go.example"}`)
	if code != http.StatusCreated || !strings.Contains(body, `"domain":"go.example"`) || !strings.Contains(body, `"short_url":"https://go.example/`) {
		t.Fatalf("create: %d %s", code, body)
	}
	c := regexp.MustCompile(`"code":"([^"]+)"`).FindStringSubmatch(body)[1]
	if code, body := do("GET", "/api/links/"+c+"?domain=GO.example", ""); code != http.StatusOK || !strings.Contains(body, `"domain":"go.example"`) {
		t.Fatalf("stats with domain: %d %s", code, body)
	}
	if code, _ := do("GET", "/api/links/"+c, ""); code != http.StatusNotFound {
		t.Fatalf("stats on the default domain: %d, want 404", code)
	}
	if code, _ := do("POST", "/api/links", `{"url": "https://example.com/x", "domain": "nope.example"}`); code != http.StatusBadRequest {
		t.Fatalf("create on an unknown domain: %d, want 400", code)
	}
	if code, _ := do("DELETE", "/api/links/"+c+"?domain=go.example", ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	if _, err := s.Resolve(ctx, s.Key("go.example", c)); !errors.Is(err, shortlink.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

func TestDomainsRefused(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	for _, d := range [][]string{{"go.example:8080"}, {"192.0.2.1"}, {"a..example"}, {"https://go.example"}, {"go.example", "GO.example."}, {"bad_name.example"}} {
		_, err := shortlink.NewService(r.Client, []*sqlx.DB{db}, shortlink.Config{BaseURL: "https://sho.rt", Namespace: r.Namespace, Domains: d})
		if !errors.Is(err, shortlink.ErrConfig) {
			t.Errorf("Domains %q: %v, want ErrConfig", d, err)
		}
	}
	s := newServiceOn(t, r, db, shortlink.Config{Domains: []string{"sho.rt", "go.example"}}) // the BaseURL's host counts as the default
	alias := strings.Repeat("a", 56)
	if _, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{Domain: "other.example"}); !errors.Is(err, shortlink.ErrInvalidOptions) {
		t.Errorf("unconfigured Options.Domain: %v, want ErrInvalidOptions", err)
	}
	if _, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{Domain: "go.example", Alias: alias}); !errors.Is(err, shortlink.ErrInvalidOptions) {
		t.Errorf("56-character alias off the default domain: %v, want ErrInvalidOptions", err)
	}
	if _, err := s.Resolve(ctx, s.Key("go.example", alias)); !errors.Is(err, shortlink.ErrNotFound) {
		t.Errorf("refused alias resolves: %v", err)
	}
	if l, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{Domain: "SHO.RT"}); err != nil || l.Domain != "" {
		t.Errorf("the BaseURL's host as Options.Domain: %+v, %v", l, err)
	}
	if _, err := s.Shorten(ctx, "https://go.example/x", shortlink.Options{}); !errors.Is(err, shortlink.ErrInvalidURL) {
		t.Errorf("a link to a short domain: %v, want ErrInvalidURL", err)
	}
}

func TestNoDomainsAnyHostAsBefore(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	s := newServiceOn(t, r, db, shortlink.Config{TablesPerDB: 4})
	l, err := s.Shorten(ctx, "https://example.com/n", shortlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(tableOf(t, db, l.Code), "~") || l.Domain != "" || s.LinkURL(l) != "https://sho.rt/"+l.Code {
		t.Fatalf("link %+v, URL %s", l, s.LinkURL(l))
	}
	if code, loc := redirectTo(s.RedirectHandler(nil), "anything.example:81", "/"+l.Code); code != http.StatusFound || loc != l.URL {
		t.Fatalf("any host without Domains: %d %q", code, loc)
	}
	if _, err := s.Shorten(ctx, "https://example.com/n", shortlink.Options{Domain: "go.example"}); !errors.Is(err, shortlink.ErrInvalidOptions) {
		t.Fatalf("Options.Domain without Domains: %v", err)
	}
}
