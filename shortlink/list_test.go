package shortlink_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shard"
	"github.com/casebook-dev/casebook/shortlink"
)

// listAll pages through owner's listing n at a time and returns every link
// in the order the pages gave them.
func listAll(t *testing.T, s *shortlink.Service, owner, tag string, n int) []*shortlink.Link {
	t.Helper()
	var all []*shortlink.Link
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("the listing does not end")
		}
		page, next, err := s.List(context.Background(), owner, shortlink.ListFilter{Tag: tag}, cursor, n)
		if err != nil {
			t.Fatalf("List(%q, %q, page %d): %v", owner, tag, pages, err)
		}
		if len(page) > n {
			t.Fatalf("a page of %d links, asked for %d", len(page), n)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		cursor = next
	}
}

// codesOf returns the codes of links.
func codesOf(links []*shortlink.Link) []string {
	c := make([]string, len(links))
	for i, l := range links {
		c[i] = l.Code
	}
	return c
}

// newestFirst sorts links as List orders them: by CreatedAt, then code,
// descending.
func newestFirst(links []*shortlink.Link) []string {
	sorted := slices.Clone(links)
	slices.SortFunc(sorted, func(a, b *shortlink.Link) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.Code, a.Code)
	})
	return codesOf(sorted)
}

// Three owners' links, made over time (several in one millisecond), with
// tags: each owner's listing, paged 7 at a time, gives each of its links
// exactly once, newest first, and no one else's; a tag filter gives exactly
// the links with that tag; the links come as stored.
func TestListPagesEveryLinkOnce(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		clk := newClock()
		s := newService(t, r, shortlink.Config{Now: clk.Now, CreateLimit: unlimited})
		owners := []string{"alice", "bob", "carol"}
		made := map[string][]*shortlink.Link{}
		tagged := map[string][]*shortlink.Link{}
		for i := range 75 {
			owner := owners[i%3]
			var tags []string
			if i%2 == 0 {
				tags = append(tags, "Even")
			}
			if i%5 == 0 {
				tags = append(tags, " five ")
			}
			o := shortlink.Options{Owner: owner, Tags: tags}
			if i%4 == 0 {
				o.Alias = fmt.Sprintf("alias-%02d", i)
			}
			l, err := s.Shorten(ctx, fmt.Sprintf("https://example.com/%d", i), o)
			if err != nil {
				t.Fatal(err)
			}
			made[owner] = append(made[owner], l)
			for _, tag := range l.Tags {
				tagged[owner+"/"+tag] = append(tagged[owner+"/"+tag], l)
			}
			if i%3 == 2 && i%9 != 8 { // a third of the steps keep the millisecond
				clk.Add(time.Millisecond)
			}
		}
		if got := made["alice"][0].Tags; !slices.Equal(got, []string{"even", "five"}) {
			t.Fatalf("tags stored as %q, want [even five]", got)
		}
		for _, owner := range owners {
			want := newestFirst(made[owner])
			for _, n := range []int{1, 7, 25, 100} {
				got := listAll(t, s, owner, "", n)
				if !slices.Equal(codesOf(got), want) {
					t.Fatalf("%s's links %d a page:\n got %v\nwant %v", owner, n, codesOf(got), want)
				}
			}
			for _, l := range listAll(t, s, owner, "", 10) {
				if l.Owner != owner || !strings.HasPrefix(l.URL, "https://example.com/") || l.Version != 1 {
					t.Fatalf("listed %+v for %s", l, owner)
				}
			}
			for _, tag := range []string{"even", "five", "FIVE "} {
				want := newestFirst(tagged[owner+"/"+strings.ToLower(strings.TrimSpace(tag))])
				if got := listAll(t, s, owner, tag, 4); !slices.Equal(codesOf(got), want) || len(want) == 0 {
					t.Fatalf("%s's links tagged %q:\n got %v\nwant %v", owner, tag, codesOf(got), want)
				}
			}
			if got := listAll(t, s, owner, "none", 4); len(got) != 0 {
				t.Fatalf("links tagged none: %v", codesOf(got))
			}
		}
		if got := listAll(t, s, "dave", "", 5); len(got) != 0 {
			t.Fatalf("dave has no links, listed %v", codesOf(got))
		}
	})
}

var unlimited = redis_rate.PerSecond(1_000_000)

// Links made while an owner pages through the listing never make a link
// appear twice or out of order, and every link that existed before the
// paging started appears exactly once.
func TestListConcurrentCreates(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{Now: clk.Now, CreateLimit: unlimited})
	var before []*shortlink.Link
	for i := range 40 {
		l, err := s.Shorten(ctx, fmt.Sprintf("https://example.com/%d", i), shortlink.Options{Owner: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, l)
		if i%2 == 0 {
			clk.Add(time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			clk.Add(time.Millisecond)
			if _, err := s.Shorten(ctx, fmt.Sprintf("https://example.com/new/%d", i), shortlink.Options{Owner: "alice"}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	got := listAll(t, s, "alice", "", 3)
	close(stop)
	wg.Wait()
	seen := map[string]bool{}
	for i, l := range got {
		if seen[l.Code] {
			t.Fatalf("%s listed twice", l.Code)
		}
		seen[l.Code] = true
		if i > 0 {
			p := got[i-1]
			if p.CreatedAt.Before(l.CreatedAt) || (p.CreatedAt.Equal(l.CreatedAt) && p.Code < l.Code) {
				t.Fatalf("%s listed before %s, which is newer", p.Code, l.Code)
			}
		}
	}
	for _, l := range before {
		if !seen[l.Code] {
			t.Fatalf("%s, made before the paging, was not listed", l.Code)
		}
	}
	// A listing started afterwards has them all.
	all, err := listAllCount(s, "alice")
	if err != nil || all < len(got) {
		t.Fatalf("a later listing has %d links (%v), the concurrent one %d", all, err, len(got))
	}
}

func listAllCount(s *shortlink.Service, owner string) (int, error) {
	n, cursor := 0, ""
	for {
		page, next, err := s.List(context.Background(), owner, shortlink.ListFilter{}, cursor, shortlink.MaxListPage)
		if err != nil {
			return 0, err
		}
		n += len(page)
		if next == "" {
			return n, nil
		}
		cursor = next
	}
}

// A cursor List did not issue — garbled, altered, or issued for another
// owner or tag — is ErrInvalidCursor (an ErrInvalidOptions); bad owners,
// tags and page sizes are ErrInvalidOptions.
func TestListCursorForged(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{Now: clk.Now, CreateLimit: unlimited})
	for range 5 {
		if _, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{Owner: "alice", Tags: []string{"t"}}); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Millisecond)
	}
	page, next, err := s.List(ctx, "alice", shortlink.ListFilter{}, "", 2)
	if err != nil || len(page) != 2 || next == "" {
		t.Fatalf("first page: %d links, next %q, %v", len(page), next, err)
	}
	flipped := []byte(next)
	flipped[len(flipped)/2] ^= 1
	for name, c := range map[string]struct{ owner, tag, cursor string }{
		"garbled":       {"alice", "", "!!not base64!!"},
		"altered":       {"alice", "", string(flipped)},
		"truncated":     {"alice", "", next[:len(next)-2]},
		"short":         {"alice", "", "AQ"},
		"another owner": {"bob", "", next},
		"another tag":   {"alice", "t", next},
	} {
		if _, _, err := s.List(ctx, c.owner, shortlink.ListFilter{Tag: c.tag}, c.cursor, 2); !errors.Is(err, shortlink.ErrInvalidCursor) || !errors.Is(err, shortlink.ErrInvalidOptions) {
			t.Errorf("%s cursor: %v, want ErrInvalidCursor", name, err)
		}
	}
	for name, c := range map[string]struct {
		owner, tag string
		n          int
	}{
		"no owner": {"", "", 2}, "control owner": {"a\x00", "", 2}, "n -1": {"alice", "", -1},
		"n too big": {"alice", "", shortlink.MaxListPage + 1}, "empty tag": {"alice", "  ", 2}, "control tag": {"alice", "a\tb", 2},
	} {
		if _, _, err := s.List(ctx, c.owner, shortlink.ListFilter{Tag: c.tag}, "", c.n); !errors.Is(err, shortlink.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
	// The genuine cursor works.
	if page, _, err := s.List(ctx, "alice", shortlink.ListFilter{}, next, 2); err != nil || len(page) != 2 {
		t.Fatalf("second page: %d, %v", len(page), err)
	}
}

// ownerIndex returns the owner index table holding owner's rows.
func ownerIndex(t *testing.T, db *sqlx.DB, tables int, owner string) string {
	t.Helper()
	r, err := shard.New([]*sqlx.DB{db}, shard.Config{Table: "links_owner", TablesPerDB: tables})
	if err != nil {
		t.Fatal(err)
	}
	return r.ByKey(owner).Table
}

func indexRows(t *testing.T, db *sqlx.DB, table, owner string) int {
	t.Helper()
	var n int
	if err := db.Get(&n, "SELECT COUNT(*) FROM "+table+" WHERE owner = ?", owner); err != nil {
		t.Fatal(err)
	}
	return n
}

// Delete takes a link off the listing at once; Update of its tags moves it
// in and out of tag listings and is recorded in its history; index rows
// left behind are invisible, and deleted by a listing once indexGrace (a
// minute) has passed since they were written.
func TestListReflectsDeleteAndUpdate(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		clk := newClock()
		db := testenv.NewSQL(t)
		s := newServiceOn(t, r, db, shortlink.Config{Now: clk.Now, TablesPerDB: 8, CreateLimit: unlimited})
		var made []*shortlink.Link
		for i := range 6 {
			l, err := s.Shorten(ctx, fmt.Sprintf("https://example.com/%d", i), shortlink.Options{Owner: "alice", Tags: []string{"old"}})
			if err != nil {
				t.Fatal(err)
			}
			made = append(made, l)
			clk.Add(time.Millisecond)
		}
		table := ownerIndex(t, db, 8, "alice")
		if n := indexRows(t, db, table, "alice"); n != 12 {
			t.Fatalf("%d index rows for 6 links with a tag each, want 12", n)
		}
		if err := s.Delete(ctx, made[2].Code); err != nil {
			t.Fatal(err)
		}
		want := newestFirst(slices.Delete(slices.Clone(made), 2, 3))
		for _, tag := range []string{"", "old"} {
			if got := listAll(t, s, "alice", tag, 2); !slices.Equal(codesOf(got), want) {
				t.Fatalf("after the delete, tag %q: %v, want %v", tag, codesOf(got), want)
			}
		}
		l, err := s.Update(ctx, made[4].Code, shortlink.Update{Tags: []string{"New", "old"}, Actor: "alice"})
		if err != nil || !slices.Equal(l.Tags, []string{"new", "old"}) || l.Version != 2 {
			t.Fatalf("adding a tag: %+v, %v", l, err)
		}
		if got := listAll(t, s, "alice", "new", 2); !slices.Equal(codesOf(got), []string{made[4].Code}) || !slices.Equal(got[0].Tags, []string{"new", "old"}) {
			t.Fatalf("tag new lists %v", codesOf(got))
		}
		if _, err := s.Update(ctx, made[4].Code, shortlink.Update{Tags: []string{}, Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		if got := listAll(t, s, "alice", "new", 2); len(got) != 0 {
			t.Fatalf("tag new lists %v after the tags were removed", codesOf(got))
		}
		if got := listAll(t, s, "alice", "old", 2); slices.Contains(codesOf(got), made[4].Code) {
			t.Fatalf("tag old still lists %s", made[4].Code)
		}
		if got := listAll(t, s, "alice", "", 2); !slices.Equal(codesOf(got), want) {
			t.Fatalf("every link, after the tag edits: %v, want %v", codesOf(got), want)
		}
		revs, err := s.History(ctx, made[4].Code, shortlink.HistoryOptions{})
		if err != nil || len(revs) != 2 || !slices.Equal(revs[0].Before.Tags, []string{"new", "old"}) || revs[0].After.Tags != nil ||
			!slices.Equal(revs[0].Changed, []string{"tags"}) || !slices.Equal(revs[1].Before.Tags, []string{"old"}) {
			t.Fatalf("history: %+v, %v", revs, err)
		}
		// Rows written less than a minute ago stay (a change may be on its way);
		// older ones that no link wants go with the next listing that meets them.
		if n := indexRows(t, db, table, "alice"); n != 12+1 {
			t.Fatalf("%d index rows before the grace passed, want 13", n)
		}
		clk.Add(time.Minute + time.Millisecond)
		listAll(t, s, "alice", "", 2)
		listAll(t, s, "alice", "old", 2)
		listAll(t, s, "alice", "new", 2)
		if n := indexRows(t, db, table, "alice"); n != 5+4 {
			t.Fatalf("%d index rows after the clean-up, want 9 (5 links, 4 tagged old)", n)
		}
		// A later edit's tag removal deletes the row itself once it is old.
		if _, err := s.Update(ctx, made[0].Code, shortlink.Update{Tags: []string{}, Actor: "alice"}); err != nil {
			t.Fatal(err)
		}
		if n := indexRows(t, db, table, "alice"); n != 8 {
			t.Fatalf("%d index rows after removing an old tag, want 8", n)
		}
	})
}

// An index row whose link does not exist, belongs to someone else, or was
// made again later (another created_at) is never listed; once a minute
// old, a listing that meets it deletes it, and a younger one is kept.
func TestListIndexRowWithoutLinkInvisible(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	db := testenv.NewSQL(t)
	s := newServiceOn(t, testenv.NewRedis(t), db, shortlink.Config{Now: clk.Now, TablesPerDB: 8, CreateLimit: unlimited})
	mine, err := s.Shorten(ctx, "https://example.com/mine", shortlink.Options{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	bobs, err := s.Shorten(ctx, "https://example.com/bob", shortlink.Options{Owner: "bob", Alias: "bobs-link"})
	if err != nil {
		t.Fatal(err)
	}
	table := ownerIndex(t, db, 8, "alice")
	now := clk.Now().UnixMilli()
	old := clk.Now().Add(-2 * time.Minute).UnixMilli()
	for _, r := range []struct {
		code             string
		created, written int64
	}{
		{"no-such-link", now + 5, old},               // a Shorten that failed
		{bobs.Code, bobs.CreatedAt.UnixMilli(), old}, // someone else's
		{mine.Code, now - 10, old},                   // an earlier link of the same code
		{"not-yet", now + 7, now},                    // a Shorten on its way
	} {
		if _, err := db.Exec("INSERT INTO "+table+" (owner, tag, created_at, code, written_at) VALUES (?, '', ?, ?, ?)", "alice", r.created, r.code, r.written); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []int{1, 2, 10} {
		if got := listAll(t, s, "alice", "", n); !slices.Equal(codesOf(got), []string{mine.Code}) {
			t.Fatalf("%d a page: %v, want only %s", n, codesOf(got), mine.Code)
		}
	}
	if n := indexRows(t, db, table, "alice"); n != 2 {
		t.Fatalf("%d index rows left, want 2 (the link's and the one on its way)", n)
	}
	// The Shorten on its way commits: its link is listed.
	clk.Add(7 * time.Millisecond)
	if _, err := s.Shorten(ctx, "https://example.com/late", shortlink.Options{Owner: "alice", Alias: "not-yet"}); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, s, "alice", "", 1); len(got) != 2 || got[1].Code != mine.Code {
		t.Fatalf("after the late link: %v", codesOf(got))
	}
}

// Tags are validated and normalised (trimmed, lower-cased, de-duplicated,
// sorted); bad tags are ErrInvalidOptions and store or change nothing;
// Update.Tags nil leaves them, an empty slice removes them.
func TestTags(t *testing.T) {
	ctx := context.Background()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{CreateLimit: unlimited})
	many := make([]string, shortlink.MaxTags+1)
	for i := range many {
		many[i] = fmt.Sprint("t", i)
	}
	for name, tags := range map[string][]string{
		"empty": {"ok", ""}, "blank": {"  "}, "control": {"a\x00b"}, "newline": {"a\nb"}, "not UTF-8": {"\xff"},
		"too long": {strings.Repeat("x", shortlink.MaxTagLen+1)}, "too many": many,
	} {
		if _, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{Alias: "bad-tags", Tags: tags, Owner: "alice"}); !errors.Is(err, shortlink.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
	if _, err := s.Resolve(ctx, "bad-tags"); !errors.Is(err, shortlink.ErrNotFound) {
		t.Fatalf("refused tags stored the link: %v", err)
	}
	if got := listAll(t, s, "alice", "", 10); len(got) != 0 {
		t.Fatalf("refused tags listed %v", codesOf(got))
	}
	longest := strings.Repeat("é", shortlink.MaxTagLen/2)
	l, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{Alias: "tagged", Owner: "alice",
		Tags: append([]string{" Go ", "go", "GO", "Rust", "ÜBER", longest}, many[:shortlink.MaxTags-4]...)})
	want := []string{"go", "rust", "t0", "t1", "t2", "t3", "t4", "t5", "über", longest}
	slices.Sort(want)
	if err != nil || !slices.Equal(l.Tags, want) {
		t.Fatalf("normalised tags %q, %v; want %q", l.Tags, err, want)
	}
	if r, err := s.Resolve(ctx, "tagged"); err != nil || !slices.Equal(r.Tags, want) {
		t.Fatalf("resolved tags %q, %v", r.Tags, err)
	}
	if _, err := s.Update(ctx, "tagged", shortlink.Update{Tags: []string{"a\x01"}}); !errors.Is(err, shortlink.ErrInvalidOptions) {
		t.Fatalf("a bad tag in an update: %v", err)
	}
	l, err = s.Update(ctx, "tagged", shortlink.Update{URL: new("https://example.com/2")})
	if err != nil || !slices.Equal(l.Tags, want) || l.Version != 2 {
		t.Fatalf("an update without Tags changed them: %+v, %v", l, err)
	}
	l, err = s.Update(ctx, "tagged", shortlink.Update{Tags: []string{}})
	if err != nil || l.Tags != nil || l.Version != 3 {
		t.Fatalf("removing the tags: %+v, %v", l, err)
	}
	if l, err := s.Update(ctx, "tagged", shortlink.Update{Tags: []string{}}); err != nil || l.Version != 3 {
		t.Fatalf("removing no tags made a version: %+v, %v", l, err)
	}
	if r, err := s.Resolve(ctx, "tagged"); err != nil || r.Tags != nil {
		t.Fatalf("resolved after removal: %q, %v", r.Tags, err)
	}
}

// ShortenMany makes each good item and refuses each bad one, in order;
// a batch over MaxBatch, or empty, makes nothing.
func TestShortenMany(t *testing.T) {
	ctx := context.Background()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{CreateLimit: unlimited})
	if _, err := s.Shorten(ctx, "https://example.com/", shortlink.Options{Alias: "taken"}); err != nil {
		t.Fatal(err)
	}
	reqs := []shortlink.Request{
		{URL: "https://example.com/1", Options: shortlink.Options{Owner: "alice", Tags: []string{"bulk"}}},
		{URL: "ftp://example.com/", Options: shortlink.Options{Owner: "alice", Alias: "bad-url"}},
		{URL: "https://example.com/3", Options: shortlink.Options{Owner: "alice", Alias: "taken"}},
		{URL: "https://example.com/4", Options: shortlink.Options{Owner: "alice", Alias: "bulk-4", Tags: []string{"bulk"}}},
		{URL: "https://example.com/5", Options: shortlink.Options{Owner: "alice", Tags: []string{""}, Alias: "bad-tag"}},
		{URL: "https://example.com/6", Options: shortlink.Options{Owner: "alice", MaxVisits: -1, Alias: "bad-max"}},
	}
	res, err := s.ShortenMany(ctx, reqs)
	if err != nil || len(res) != len(reqs) {
		t.Fatalf("%d results, %v", len(res), err)
	}
	wantErr := []error{nil, shortlink.ErrInvalidURL, shortlink.ErrAliasTaken, nil, shortlink.ErrInvalidOptions, shortlink.ErrInvalidOptions}
	for i, r := range res {
		switch {
		case wantErr[i] == nil && (r.Err != nil || r.Link == nil || r.Link.URL != reqs[i].URL):
			t.Errorf("item %d: %+v, want a link to %s", i, r, reqs[i].URL)
		case wantErr[i] != nil && (!errors.Is(r.Err, wantErr[i]) || r.Link != nil):
			t.Errorf("item %d: %+v, want %v", i, r, wantErr[i])
		}
	}
	if res[3].Link.Code != "bulk-4" {
		t.Fatalf("item 3's code %q", res[3].Link.Code)
	}
	for _, code := range []string{"bad-url", "bad-tag", "bad-max"} {
		if _, err := s.Resolve(ctx, code); !errors.Is(err, shortlink.ErrNotFound) {
			t.Errorf("refused item %s stored: %v", code, err)
		}
	}
	if l, err := s.Resolve(ctx, "taken"); err != nil || l.URL != "https://example.com/" {
		t.Fatalf("the taken alias changed: %+v, %v", l, err)
	}
	if got := listAll(t, s, "alice", "bulk", 10); !slices.Equal(codesOf(got), newestFirst([]*shortlink.Link{res[0].Link, res[3].Link})) {
		t.Fatalf("bulk-tagged links %v", codesOf(got))
	}
	for _, n := range []int{0, shortlink.MaxBatch + 1} {
		batch := make([]shortlink.Request, n)
		for i := range batch {
			batch[i] = shortlink.Request{URL: "https://example.com/many", Options: shortlink.Options{Owner: "bob"}}
		}
		if res, err := s.ShortenMany(ctx, batch); !errors.Is(err, shortlink.ErrInvalidOptions) || res != nil {
			t.Fatalf("a batch of %d: %v, %v", n, res, err)
		}
	}
	if got := listAll(t, s, "bob", "", 10); len(got) != 0 {
		t.Fatalf("a refused batch made %d links", len(got))
	}
}

// Links made before the owner index existed are listed after Migrate fills
// it (once: the meta row says it is filled).
func TestMigrateFillsOwnerIndex(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	cfg := shortlink.Config{Now: clk.Now, TablesPerDB: 4, CreateLimit: unlimited}
	s := newServiceOn(t, r, db, cfg)
	var made []*shortlink.Link
	for i := range 9 {
		l, err := s.Shorten(ctx, fmt.Sprintf("https://example.com/%d", i), shortlink.Options{Owner: "alice", Tags: []string{fmt.Sprint("t", i%2)}})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, l)
		clk.Add(time.Millisecond)
	}
	if _, err := s.Shorten(ctx, "https://example.com/anon", shortlink.Options{}); err != nil {
		t.Fatal(err)
	}
	// The deployment as the version before the index left it.
	router, _ := shard.New([]*sqlx.DB{db}, shard.Config{Table: "links_owner", TablesPerDB: 4})
	for _, sh := range router.All() {
		if _, err := db.Exec("DROP TABLE " + sh.Table); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec("DELETE FROM shortlink_meta WHERE name = 'owner_index_filled'"); err != nil {
		t.Fatal(err)
	}
	s2 := newServiceOn(t, r, db, cfg) // migrates
	if got := listAll(t, s2, "alice", "", 4); !slices.Equal(codesOf(got), newestFirst(made)) {
		t.Fatalf("after the fill: %v, want %v", codesOf(got), newestFirst(made))
	}
	if got := listAll(t, s2, "alice", "t1", 4); len(got) != 4 {
		t.Fatalf("tag t1 after the fill: %v", codesOf(got))
	}
}

// A page that meets more invisible rows than its rounds read returns what
// it found with a cursor after the last row it read, so paging on still
// gives every link exactly once.
func TestListManyInvisibleRows(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	db := testenv.NewSQL(t)
	s := newServiceOn(t, testenv.NewRedis(t), db, shortlink.Config{Now: clk.Now, TablesPerDB: 4, CreateLimit: unlimited})
	older, err := s.Shorten(ctx, "https://example.com/older", shortlink.Options{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	table := ownerIndex(t, db, 4, "alice")
	for i := range 30 { // newer than older, fresh: kept, never shown
		if _, err := db.Exec("INSERT INTO "+table+" (owner, tag, created_at, code, written_at) VALUES ('alice', '', ?, ?, ?)",
			clk.Now().UnixMilli()+int64(i), fmt.Sprintf("gone-%02d", i), clk.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(time.Second)
	newer, err := s.Shorten(ctx, "https://example.com/newer", shortlink.Options{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	page, next, err := s.List(ctx, "alice", shortlink.ListFilter{}, "", 2)
	if err != nil || !slices.Equal(codesOf(page), []string{newer.Code}) || next == "" {
		t.Fatalf("first page %v, next %q, %v: want the newer link and a cursor (4 rounds of 3 rows)", codesOf(page), next, err)
	}
	if got := listAll(t, s, "alice", "", 2); !slices.Equal(codesOf(got), []string{newer.Code, older.Code}) {
		t.Fatalf("paging on: %v", codesOf(got))
	}
	if n := indexRows(t, db, table, "alice"); n != 32 {
		t.Fatalf("%d index rows, want 32 (fresh rows are kept)", n)
	}
}
