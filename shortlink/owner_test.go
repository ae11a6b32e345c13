package shortlink_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shard"
	"github.com/casebook-dev/casebook/shortlink"
)

// The public redirects and the owners' API are two handlers: the redirect
// handler serves no API route; the API answers 401 to a request its
// authorizer refuses and changes nothing; a link belongs to the owner who
// made it, and to anyone else — a forged request naming a real code — it
// is 404, as for a code that does not exist, and stays untouched.
func TestAPIHandlerOwners(t *testing.T) {
	s := newService(t, testenv.NewRedis(t), shortlink.Config{})
	api := ownersAPI(t, s)
	public := httptest.NewServer(s.RedirectHandler(testIP))
	t.Cleanup(public.Close)

	do := func(method, url, who, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, url+"?as="+neturl.QueryEscape(who), bytes.NewReader([]byte(body)))
		res, out := send(t, req, "9.9.9.9")
		return res.StatusCode, out
	}
	link := `{"url":"https://example.com/owned","alias":"owned-1"}`
	for _, who := range []string{"", "nobody"} {
		if code, _ := do("POST", api.URL+"/api/links", who, link); code != http.StatusUnauthorized {
			t.Fatalf("create as %q: %d, want 401", who, code)
		}
	}
	if _, err := s.Resolve(context.Background(), "owned-1"); !errors.Is(err, shortlink.ErrNotFound) {
		t.Fatalf("a refused create stored the link: %v", err)
	}
	if code, _ := do("POST", public.URL+"/api/links", "alice", link); code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
		t.Fatalf("the public handler served the API: %d", code)
	}
	code, body := do("POST", api.URL+"/api/links", "alice", link)
	if code != http.StatusCreated || body["owner"] != "alice" || body["code"] != "owned-1" {
		t.Fatalf("alice creates: %d %v", code, body)
	}
	for _, who := range []string{"bob", "Alice", "ALICE", "alice ", " alice", "alice\u200b"} { // another owner, and spellings that are not alice
		if code, _ := do("GET", api.URL+"/api/links/owned-1", who, ""); code != http.StatusNotFound {
			t.Errorf("%q reads alice's link: %d, want 404", who, code)
		}
		if code, _ := do("DELETE", api.URL+"/api/links/owned-1", who, ""); code != http.StatusNotFound {
			t.Errorf("%q deletes alice's link: %d, want 404", who, code)
		}
	}
	for _, base := range []string{api.URL, public.URL} {
		if res := get(t, base+"/owned-1", "8.8.8.8"); res.StatusCode != http.StatusFound || res.Header.Get("Location") != "https://example.com/owned" {
			t.Fatalf("redirect through %s after the forged deletes: %d %q", base, res.StatusCode, res.Header.Get("Location"))
		}
	}
	if code, body := do("GET", api.URL+"/api/links/owned-1", "alice", ""); code != http.StatusOK || body["code"] != "owned-1" {
		t.Fatalf("alice reads her link: %d %v", code, body)
	}
	if code, _ := do("DELETE", api.URL+"/api/links/owned-1", "nobody", ""); code != http.StatusUnauthorized {
		t.Fatalf("an unauthorized delete: %d, want 401", code)
	}
	if code, _ := do("DELETE", api.URL+"/api/links/owned-1", "alice", ""); code != http.StatusNoContent {
		t.Fatalf("alice deletes her link: %d", code)
	}
	if res := get(t, public.URL+"/owned-1", "8.8.8.8"); res.StatusCode != http.StatusNotFound {
		t.Fatalf("redirect after the delete: %d, want 404", res.StatusCode)
	}
}

// Options.Owner is at most MaxOwner bytes of UTF-8 without control
// characters; anything else is ErrInvalidOptions and stores nothing.
func TestOwnerValidated(t *testing.T) {
	s := newService(t, testenv.NewRedis(t), shortlink.Config{})
	ctx := context.Background()
	for _, owner := range []string{"a\x00b", "tab\there", "line\nbreak", "\xff\xfe", strings.Repeat("x", shortlink.MaxOwner+1), "del\x7f"} {
		if _, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{Owner: owner, Alias: "bad-owner"}); !errors.Is(err, shortlink.ErrInvalidOptions) {
			t.Errorf("owner %q: %v, want ErrInvalidOptions", owner, err)
		}
	}
	if _, err := s.Resolve(ctx, "bad-owner"); !errors.Is(err, shortlink.ErrNotFound) {
		t.Fatalf("a refused owner stored the link: %v", err)
	}
	for i, owner := range []string{strings.Repeat("é", shortlink.MaxOwner/2), "org/team-7 (ünïcode)"} {
		l, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{Owner: owner})
		if err != nil || l.Owner != owner {
			t.Fatalf("owner %d: %+v, %v", i, l, err)
		}
	}
}

// Migrate adds the owner and version columns to link tables an earlier
// version made, whose links keep working with no owner, at version 1, and
// can be edited; migrating again changes nothing.
func TestMigrateAddsOwnerColumn(t *testing.T) {
	ctx := context.Background()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	router, err := shard.New([]*sqlx.DB{db}, shard.Config{Table: "links", TablesPerDB: 4})
	if err != nil {
		t.Fatal(err)
	}
	// The tables as the version before owners made them.
	old := `CREATE TABLE {{table}} (
	code       ` + sqlutil.BinaryKey(db, 64) + ` NOT NULL PRIMARY KEY,
	long_url   VARCHAR(2048) NOT NULL,
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL DEFAULT 0,
	max_visits BIGINT NOT NULL DEFAULT 0,
	redirect   SMALLINT NOT NULL DEFAULT 0,
	clicks     BIGINT NOT NULL DEFAULT 0
)`
	if err := router.CreateTables(ctx, old); err != nil {
		t.Fatal(err)
	}
	sh := router.ByKey("before-owners")
	if _, err := sh.DB.ExecContext(ctx, "INSERT INTO "+sh.Table+" (code, long_url, created_at) VALUES (?, ?, ?)",
		"before-owners", "https://example.com/old", testenv.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	s := newServiceOn(t, r, db, shortlink.Config{TablesPerDB: 4}) // migrates
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrating again: %v", err)
	}
	l, err := s.Resolve(ctx, "before-owners")
	if err != nil || l.URL != "https://example.com/old" || l.Owner != "" {
		t.Fatalf("the old link: %+v, %v", l, err)
	}
	if st, err := s.Stats(ctx, "before-owners"); err != nil || st.Clicks != 1 {
		t.Fatalf("its stats: %+v, %v", st, err)
	}
	if l.Version != 1 {
		t.Fatalf("the old link at version %d, want 1", l.Version)
	}
	if l, err := s.Update(ctx, "before-owners", shortlink.Update{URL: new("https://example.com/edited"), IfVersion: 1}); err != nil || l.Version != 2 {
		t.Fatalf("editing the old link: %+v, %v", l, err)
	}
	if revs, err := s.History(ctx, "before-owners", shortlink.HistoryOptions{}); err != nil || len(revs) != 1 || revs[0].Before.URL != "https://example.com/old" {
		t.Fatalf("its history: %+v, %v", revs, err)
	}
	nl, err := s.Shorten(ctx, "https://example.com/new", shortlink.Options{Owner: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	for _, t2 := range router.All() {
		var n int
		if err := t2.DB.GetContext(ctx, &n, "SELECT COUNT(*) FROM "+t2.Table+" WHERE owner = ?", "carol"); err != nil {
			t.Fatalf("%s has no owner column after Migrate: %v", t2.Table, err)
		}
		if n == 1 && router.ByKey(nl.Code).Table != t2.Table {
			t.Fatalf("carol's link in %s, not its code's table", t2.Table)
		}
	}
}

// ownersAPI serves s's redirects and its API handler on one test server.
// The query's "as" names the owner (a header would be trimmed by net/http,
// and "alice " must reach the block); "nobody" is refused.
func ownersAPI(t *testing.T, s *shortlink.Service) *httptest.Server {
	t.Helper()
	authorize := func(r *http.Request) (string, bool) {
		who := r.URL.Query().Get("as")
		return who, who != "" && who != "nobody"
	}
	mux := http.NewServeMux()
	mux.Handle("/", s.RedirectHandler(testIP))
	mux.Handle("/api/", s.APIHandler(authorize, testIP))
	api := httptest.NewServer(mux)
	t.Cleanup(api.Close)
	return api
}
