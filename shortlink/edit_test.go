package shortlink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

// linkKey is the Redis key of code's cache entry under r's namespace.
func linkKey(r *testenv.Redis, code string) string {
	return keys.NewSpace(keys.Join(r.Namespace, "shortlink")).Key(code, "link")
}

// redisEntry reads code's Redis cache entry ("" when there is none).
func redisEntry(t *testing.T, r *testenv.Redis, code string) string {
	t.Helper()
	v, err := r.Client.Get(context.Background(), linkKey(r, code)).Result()
	if err != nil && err.Error() != "redis: nil" {
		t.Fatal(err)
	}
	return v
}

// twoProcesses are two Services sharing Redis, SQL and a clock, each with
// its own local cache.
func twoProcesses(t *testing.T, r *testenv.Redis, cfg shortlink.Config) (a, b *shortlink.Service) {
	t.Helper()
	db := testenv.NewSQL(t)
	if cfg.TablesPerDB == 0 {
		cfg.TablesPerDB = 16
	}
	return newServiceOn(t, r, db, cfg), newServiceOn(t, r, db, cfg)
}

// An edit changes each setting, makes one version and one revision each,
// keeps the clicks, and is seen at once by the editing process and by
// Redis — so by another process with a cold local cache; a warm one within
// LocalTTL. An edit that changes no value makes no version. History reads
// newest first, in pages.
func TestUpdateAndHistory(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		clk := newClock()
		const localTTL = 300 * time.Millisecond
		a, b := twoProcesses(t, r, shortlink.Config{Now: clk.Now, LocalTTL: localTTL, FlushEvery: time.Hour})
		l, err := a.Shorten(ctx, "https://example.com/v1", shortlink.Options{Alias: "edit-me", Owner: "alice"})
		if err != nil || l.Version != 1 {
			t.Fatalf("%+v, %v", l, err)
		}
		for _, s := range []*shortlink.Service{a, b} { // both warm
			if _, err := s.Resolve(ctx, "edit-me"); err != nil {
				t.Fatal(err)
			}
			s.WaitLocal()
		}
		start := testenv.Now()
		got, err := a.Update(ctx, "edit-me", shortlink.Update{URL: new("HTTPS://Example.COM:443/v2"), Actor: "alice"})
		if err != nil || got.Version != 2 || got.URL != "https://example.com/v2" || got.Owner != "alice" {
			t.Fatalf("update: %+v, %v", got, err)
		}
		if l, err := a.Resolve(ctx, "edit-me"); err != nil || l.URL != "https://example.com/v2" {
			t.Fatalf("the editing process: %+v, %v", l, err)
		}
		var cached shortlink.Link
		if err := json.Unmarshal([]byte(redisEntry(t, r, "edit-me")), &cached); err != nil || cached.Version != 2 || cached.URL != got.URL {
			t.Fatalf("Redis after the update: %+v, %v", cached, err)
		}
		// b may serve v1 from its local cache, for at most LocalTTL.
		for {
			l, err := b.ResolveWith(ctx, "edit-me", shortlink.ResolveOptions{Peek: true}) // no click
			if err != nil {
				t.Fatal(err)
			}
			if l.Version == 2 {
				break
			}
			if el := testenv.Since(start); el > localTTL+time.Second {
				t.Fatalf("b still serves version %d %v after the update", l.Version, el)
			}
			time.Sleep(10 * time.Millisecond)
		}

		// Every setting, then a change of no value.
		steps := []shortlink.Update{
			{TTL: time.Hour, Actor: "alice"},
			{MaxVisits: new(int64(10)), Redirect: new(301), Actor: "bob"},
			{NeverExpires: true, MaxVisits: new(int64(0)), Redirect: new(0), Actor: "alice"},
			{ExpiresAt: clk.Now().Add(time.Minute), Actor: "alice"},
		}
		for i, u := range steps {
			got, err = a.Update(ctx, "edit-me", u)
			if err != nil || got.Version != int64(i+3) {
				t.Fatalf("step %d: %+v, %v", i, got, err)
			}
		}
		if got.ExpiresAt.UnixMilli() != clk.Now().Add(time.Minute).UnixMilli() || got.MaxVisits != 0 || got.Redirect != 0 {
			t.Fatalf("after the steps: %+v", got)
		}
		same, err := a.Update(ctx, "edit-me", shortlink.Update{URL: new("https://example.com/v2"), Actor: "carol"})
		if err != nil || same.Version != 6 {
			t.Fatalf("a change of no value: %+v, %v", same, err)
		}
		b.Close() // flushes b's click
		if st, err := a.Stats(ctx, "edit-me"); err != nil || st.Clicks != 3 {
			t.Fatalf("clicks across edits: %+v, %v", st, err)
		}

		revs, err := a.History(ctx, "edit-me", shortlink.HistoryOptions{})
		if err != nil || len(revs) != 5 {
			t.Fatalf("history: %+v, %v", revs, err)
		}
		wantChanged := []string{"expires_at", "expires_at max_visits redirect", "max_visits redirect", "expires_at", "url"}
		for i, rev := range revs {
			if rev.Version != int64(6-i) || rev.Code != "edit-me" || strings.Join(rev.Changed, " ") != wantChanged[i] {
				t.Errorf("revision %d: %+v", i, rev)
			}
			if i > 0 && !revs[i].After.ExpiresAt.Equal(revs[i-1].Before.ExpiresAt) {
				t.Errorf("revision %d's after is not the next one's before", i)
			}
		}
		if first := revs[4]; first.Actor != "alice" || first.Before.URL != "https://example.com/v1" || first.After.URL != "https://example.com/v2" || !first.At.Equal(clk.Now()) {
			t.Fatalf("the first revision: %+v", first)
		}
		if revs[2].Actor != "bob" || revs[2].After.MaxVisits != 10 || revs[2].After.Redirect != 301 {
			t.Fatalf("bob's revision: %+v", revs[2])
		}
		page, err := a.History(ctx, "edit-me", shortlink.HistoryOptions{Before: 4, Limit: 1})
		if err != nil || len(page) != 1 || page[0].Version != 3 {
			t.Fatalf("page before 4: %+v, %v", page, err)
		}
		for _, o := range []shortlink.HistoryOptions{{Limit: -1}, {Limit: shortlink.MaxHistoryPage + 1}, {Before: -1}} {
			if _, err := a.History(ctx, "edit-me", o); !errors.Is(err, shortlink.ErrInvalidOptions) {
				t.Errorf("history %+v: %v", o, err)
			}
		}
		if _, err := a.History(ctx, "no-such", shortlink.HistoryOptions{}); !errors.Is(err, shortlink.ErrNotFound) {
			t.Fatalf("history of an unknown code: %v", err)
		}

		// Deleting the link deletes its history: the alias made again
		// starts at version 1 and edits from 2.
		if err := a.Delete(ctx, "edit-me"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Shorten(ctx, "https://example.com/again", shortlink.Options{Alias: "edit-me"}); err != nil {
			t.Fatal(err)
		}
		if got, err := a.Update(ctx, "edit-me", shortlink.Update{URL: new("https://example.com/again2")}); err != nil || got.Version != 2 {
			t.Fatalf("editing the alias made again: %+v, %v", got, err)
		}
		if revs, err := a.History(ctx, "edit-me", shortlink.HistoryOptions{}); err != nil || len(revs) != 1 {
			t.Fatalf("history of the alias made again: %+v, %v", revs, err)
		}
	})
}

// Every bad Update is refused with an error wrapping the package's, and
// changes nothing: not the row, not the history, not either cache.
func TestUpdateRefusalsChangeNothing(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	r := testenv.NewRedis(t)
	db := testenv.NewSQL(t)
	cfg := shortlink.Config{Now: clk.Now, Blocklist: []string{"blocked.example"}, TablesPerDB: 16}
	a, b := newServiceOn(t, r, db, cfg), newServiceOn(t, r, db, cfg)
	if _, err := a.Shorten(ctx, "https://example.com/keep", shortlink.Options{Alias: "keep-me", Redirect: 307, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	before, err := a.Resolve(ctx, "keep-me")
	if err != nil {
		t.Fatal(err)
	}
	a.WaitLocal()
	entry := redisEntry(t, r, "keep-me")
	past, far := clk.Now().Add(-time.Second), clk.Now().Add(shortlink.MaxLifetime+time.Second)
	bad := []struct {
		u    shortlink.Update
		code string
		want error
	}{
		{shortlink.Update{Actor: "alice"}, "keep-me", shortlink.ErrInvalidOptions},
		{shortlink.Update{URL: new("")}, "keep-me", shortlink.ErrInvalidURL},
		{shortlink.Update{URL: new("javascript:alert(1)")}, "keep-me", shortlink.ErrInvalidURL},
		{shortlink.Update{URL: new("https://sho.rt/loop")}, "keep-me", shortlink.ErrInvalidURL},
		{shortlink.Update{URL: new("https://www.blocked.example/")}, "keep-me", shortlink.ErrBlocked},
		{shortlink.Update{URL: new("https://user:pw@example.com/")}, "keep-me", shortlink.ErrInvalidURL},
		{shortlink.Update{ExpiresAt: past}, "keep-me", shortlink.ErrInvalidOptions},
		{shortlink.Update{ExpiresAt: far}, "keep-me", shortlink.ErrInvalidOptions},
		{shortlink.Update{TTL: -time.Second}, "keep-me", shortlink.ErrInvalidOptions},
		{shortlink.Update{TTL: time.Hour, ExpiresAt: far}, "keep-me", shortlink.ErrInvalidOptions},
		{shortlink.Update{TTL: time.Hour, NeverExpires: true}, "keep-me", shortlink.ErrInvalidOptions},
		{shortlink.Update{MaxVisits: new(int64(-1))}, "keep-me", shortlink.ErrInvalidOptions},
		{shortlink.Update{MaxVisits: new(int64(shortlink.MaxVisitLimit + 1))}, "keep-me", shortlink.ErrInvalidOptions},
		{shortlink.Update{Redirect: new(303)}, "keep-me", shortlink.ErrInvalidOptions},
		{shortlink.Update{URL: new("https://example.com/x"), Actor: "a\x00b"}, "keep-me", shortlink.ErrInvalidOptions},
		{shortlink.Update{URL: new("https://example.com/x"), Actor: strings.Repeat("x", shortlink.MaxOwner+1)}, "keep-me", shortlink.ErrInvalidOptions},
		{shortlink.Update{URL: new("https://example.com/x"), IfVersion: -1}, "keep-me", shortlink.ErrInvalidOptions},
		{shortlink.Update{URL: new("https://example.com/x"), IfVersion: 2}, "keep-me", shortlink.ErrConflict},
		{shortlink.Update{URL: new("https://example.com/x")}, "no-such-code", shortlink.ErrNotFound},
		{shortlink.Update{URL: new("https://example.com/x")}, "not/a/code", shortlink.ErrNotFound},
	}
	for i, c := range bad {
		if _, err := a.Update(ctx, c.code, c.u); !errors.Is(err, c.want) {
			t.Errorf("%d %+v: %v, want %v", i, c.u, err, c.want)
		}
		if got := redisEntry(t, r, "keep-me"); got != entry {
			t.Fatalf("%d: the Redis entry changed: %s", i, got)
		}
		if revs, err := a.History(ctx, "keep-me", shortlink.HistoryOptions{}); err != nil || len(revs) != 0 {
			t.Fatalf("%d: history %+v, %v", i, revs, err)
		}
		if l, err := a.Resolve(ctx, "keep-me"); err != nil || !sameLink(l, before) {
			t.Fatalf("%d: the link through the local cache: %+v, %v", i, l, err)
		}
	}
	if st := a.CacheStats(); st.SQLReads != 1 {
		t.Fatalf("the refusals reached past the local cache: %+v", st)
	}
	if l, err := b.Resolve(ctx, "keep-me"); err != nil || !sameLink(l, before) { // through Redis
		t.Fatalf("the link through Redis: %+v, %v", l, err)
	}
	r.Client.Del(ctx, linkKey(r, "keep-me"))
	c := newServiceOn(t, r, db, shortlink.Config{TablesPerDB: 16}) // a cold process: reads the row
	if l, err := c.Resolve(ctx, "keep-me"); err != nil || !sameLink(l, before) {
		t.Fatalf("the row: %+v, %v", l, err)
	}
	if l, err := a.Resolve(ctx, "no-such-code"); !errors.Is(err, shortlink.ErrNotFound) {
		t.Fatalf("an update of an unknown code made it: %+v, %v", l, err)
	}
}

// sameLink compares links field by field, times as instants.
func sameLink(a, b *shortlink.Link) bool {
	return a.Code == b.Code && a.URL == b.URL && a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.MaxVisits == b.MaxVisits && a.Redirect == b.Redirect && a.Owner == b.Owner && a.Version == b.Version
}

// IfVersion: a change applies to that version only. The same Update sent
// again after its reply was lost succeeds without a second version; the
// same version edited by another actor, or by the same actor with another
// change, is ErrConflict and changes nothing.
func TestUpdateIfVersion(t *testing.T) {
	ctx := context.Background()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{})
	if _, err := s.Shorten(ctx, "https://example.com/v1", shortlink.Options{Alias: "cas-me"}); err != nil {
		t.Fatal(err)
	}
	u := shortlink.Update{URL: new("https://example.com/v2"), TTL: time.Hour, Actor: "alice", IfVersion: 1}
	first, err := s.Update(ctx, "cas-me", u)
	if err != nil || first.Version != 2 {
		t.Fatalf("%+v, %v", first, err)
	}
	again, err := s.Update(ctx, "cas-me", u) // the retry after a lost reply
	if err != nil || again.Version != 2 || !again.ExpiresAt.Equal(first.ExpiresAt) {
		t.Fatalf("the retry: %+v, %v", again, err)
	}
	for _, other := range []shortlink.Update{
		{URL: new("https://example.com/v2"), TTL: time.Hour, Actor: "bob", IfVersion: 1},
		{URL: new("https://example.com/v3"), Actor: "alice", IfVersion: 1},
		{URL: new("https://example.com/v3"), Actor: "alice", IfVersion: 3},
	} {
		if l, err := s.Update(ctx, "cas-me", other); !errors.Is(err, shortlink.ErrConflict) {
			t.Errorf("%+v: %+v, %v; want ErrConflict", other, l, err)
		}
	}
	if revs, err := s.History(ctx, "cas-me", shortlink.HistoryOptions{}); err != nil || len(revs) != 1 || revs[0].Version != 2 {
		t.Fatalf("history: %+v, %v", revs, err)
	}
	if l, err := s.Resolve(ctx, "cas-me"); err != nil || l.URL != "https://example.com/v2" || l.Version != 2 {
		t.Fatalf("%+v, %v", l, err)
	}
	if l, err := s.Update(ctx, "cas-me", shortlink.Update{URL: new("https://example.com/v3"), IfVersion: 2}); err != nil || l.Version != 3 {
		t.Fatalf("at the current version: %+v, %v", l, err)
	}
}

// A reader that read the old row before an edit committed and fills the
// caches after it cannot put the old version back: not in Redis, where
// the fill is a compare-and-set on the version, nor in the local cache.
func TestUpdateSlowReaderKeepsNewVersion(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		db := testenv.NewSQL(t)
		cfg := shortlink.Config{TablesPerDB: 16}
		a, b := newServiceOn(t, r, db, cfg), newServiceOn(t, r, db, cfg)
		old, err := a.Shorten(ctx, "https://example.com/old", shortlink.Options{Alias: "slow-fill"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Update(ctx, "slow-fill", shortlink.Update{URL: new("https://example.com/new")}); err != nil {
			t.Fatal(err)
		}
		if err := b.FillRedis(ctx, old); err != nil { // b's lookup read the row before the edit
			t.Fatal(err)
		}
		a.RememberLocal(old) // and so did one of a's
		if l, err := a.Resolve(ctx, "slow-fill"); err != nil || l.Version != 2 {
			t.Fatalf("a after the slow fill: %+v, %v", l, err)
		}
		if l, err := b.Resolve(ctx, "slow-fill"); err != nil || l.Version != 2 || l.URL != "https://example.com/new" {
			t.Fatalf("b after the slow fill: %+v, %v", l, err)
		}
		if st := b.CacheStats(); st.RedisHits != 1 || st.SQLReads != 0 {
			t.Fatalf("b should read the new version from Redis: %+v", st)
		}
		// An entry of a version before versions (0) is read from SQL again.
		r.Client.Set(ctx, linkKey(r, "slow-fill"), `{"code":"slow-fill","url":"https://example.com/ancient"}`, time.Hour)
		c := newServiceOn(t, r, db, cfg)
		if l, err := c.Resolve(ctx, "slow-fill"); err != nil || l.Version != 2 || l.URL != "https://example.com/new" {
			t.Fatalf("over an entry without a version: %+v, %v", l, err)
		}
		if st := c.CacheStats(); st.SQLReads != 1 {
			t.Fatalf("an entry without a version was served: %+v", st)
		}
		var cached shortlink.Link
		if err := json.Unmarshal([]byte(redisEntry(t, r, "slow-fill")), &cached); err != nil || cached.Version != 2 {
			t.Fatalf("the entry refilled: %+v, %v", cached, err)
		}
	})
}

// An expired or used-up link can be edited, and revived: the expiry moved
// on, the visit limit raised above the visits spent; a limit lowered to the
// visits spent leaves it used up. The visit counter in Redis agrees: its
// lifetime follows the new expiry.
func TestUpdateRevives(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	r := testenv.NewRedis(t)
	a, b := twoProcesses(t, r, shortlink.Config{Now: clk.Now, LocalTTL: -1})
	if _, err := a.Shorten(ctx, "https://example.com/soon", shortlink.Options{Alias: "soon-gone", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Minute)
	if _, err := a.Resolve(ctx, "soon-gone"); !errors.Is(err, shortlink.ErrExpired) {
		t.Fatal(err)
	}
	if _, err := a.Update(ctx, "soon-gone", shortlink.Update{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Resolve(ctx, "soon-gone"); err != nil {
		t.Fatalf("revived: %v", err)
	}

	if _, err := a.Shorten(ctx, "https://example.com/twice", shortlink.Options{Alias: "twice", MaxVisits: 2, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	visit := func(s *shortlink.Service, want error) {
		t.Helper()
		if _, err := s.Resolve(ctx, "twice"); !errors.Is(err, want) {
			t.Fatalf("visit: %v, want %v", err, want)
		}
	}
	visit(a, nil)
	visit(b, nil)
	visit(a, shortlink.ErrMaxVisits)
	if _, err := a.Update(ctx, "twice", shortlink.Update{MaxVisits: new(int64(3)), TTL: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	visits := keys.NewSpace(keys.Join(r.Namespace, "shortlink")).Key("twice", "visits")
	if ttl := r.Client.PTTL(ctx, visits).Val(); ttl < 47*time.Hour {
		t.Fatalf("the visit counter lives %v, not the new expiry's 48h", ttl)
	}
	visit(b, nil)
	visit(a, shortlink.ErrMaxVisits)
	if _, err := a.Update(ctx, "twice", shortlink.Update{MaxVisits: new(int64(1))}); err != nil {
		t.Fatal(err)
	}
	visit(b, shortlink.ErrMaxVisits)
	if _, err := a.Update(ctx, "twice", shortlink.Update{MaxVisits: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	visit(b, nil)
}

// Many editors race on one link with IfVersion while readers redirect:
// exactly one Update wins each version, the history has every version
// once and in order, every redirect goes to a committed URL and, once
// LocalTTL has passed since a version was committed, to that version or a
// later one; at the end every cache holds the final row.
func TestUpdateConcurrentEditors(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		const localTTL = 200 * time.Millisecond
		const versions = 30
		db := testenv.NewSQL(t)
		cfg := shortlink.Config{LocalTTL: localTTL, TablesPerDB: 4, FlushEvery: time.Hour}
		a, b := newServiceOn(t, r, db, cfg), newServiceOn(t, r, db, cfg)
		if _, err := a.Shorten(ctx, "https://example.com/0", shortlink.Options{Alias: "hot-edit"}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		urls := map[int64]string{1: "https://example.com/0"}
		committed := map[int64]time.Time{1: testenv.Now()}
		var latest atomic.Int64
		latest.Store(1)
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Go(func() {
				s := []*shortlink.Service{a, b}[g%2]
				for i := 0; latest.Load() < versions; i++ {
					v := latest.Load()
					u := fmt.Sprintf("https://example.com/g%d/%d", g, i)
					l, err := s.Update(ctx, "hot-edit", shortlink.Update{URL: new(u), Actor: fmt.Sprint("editor-", g), IfVersion: v})
					if errors.Is(err, shortlink.ErrConflict) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if prev, dup := urls[l.Version]; dup || l.Version != v+1 {
						t.Errorf("version %d won twice (%s, %s) or from %d", l.Version, prev, u, v)
					}
					urls[l.Version], committed[l.Version] = u, testenv.Now()
					mu.Unlock()
					latest.CompareAndSwap(v, l.Version)
				}
			})
		}
		type seen struct {
			at      time.Time
			version int64
			url     string
		}
		var reads []seen
		var readers sync.WaitGroup
		readers.Go(func() { // through the Service, in process a
			for latest.Load() < versions {
				at := testenv.Now()
				l, err := a.ResolveWith(ctx, "hot-edit", shortlink.ResolveOptions{Peek: true})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				reads = append(reads, seen{at, l.Version, l.URL})
				mu.Unlock()
			}
		})
		redirects := server(t, b)
		readers.Go(func() { // as redirects, in process b
			for latest.Load() < versions {
				at := testenv.Now()
				res, err := noFollow.Get(redirects + "/hot-edit")
				if err != nil || res.StatusCode != http.StatusFound {
					t.Errorf("redirect: %v, %v", res, err)
					return
				}
				res.Body.Close()
				mu.Lock()
				reads = append(reads, seen{at, 0, res.Header.Get("Location")}) // version 0: known by its URL
				mu.Unlock()
			}
		})
		wg.Wait()
		readers.Wait()
		if len(urls) != versions {
			t.Fatalf("%d versions committed, want %d", len(urls), versions)
		}
		if len(reads) < 2 {
			t.Fatalf("only %d reads during the edits", len(reads))
		}
		t.Logf("%d versions, %d reads during the edits", versions, len(reads))
		slack := localTTL + time.Second // a lookup in flight at the commit, on a loaded machine
		versionOf := map[string]int64{}
		for v, u := range urls {
			versionOf[u] = v
		}
		for _, rd := range reads {
			if rd.version == 0 {
				rd.version = versionOf[rd.url]
			}
			if urls[rd.version] != rd.url {
				t.Fatalf("a redirect to %s as version %d, which committed %s", rd.url, rd.version, urls[rd.version])
			}
			for v, at := range committed {
				if v > rd.version && rd.at.Sub(at) > slack {
					t.Fatalf("a read %v after version %d committed served version %d", rd.at.Sub(at), v, rd.version)
				}
			}
		}
		revs, err := a.History(ctx, "hot-edit", shortlink.HistoryOptions{Limit: shortlink.MaxHistoryPage})
		if err != nil || len(revs) != versions-1 {
			t.Fatalf("history: %d revisions, %v", len(revs), err)
		}
		for i, rev := range revs {
			v := int64(versions - i)
			if rev.Version != v || rev.After.URL != urls[v] || rev.Before.URL != urls[v-1] {
				t.Fatalf("revision %d: %+v; want version %d %s → %s", i, rev, v, urls[v-1], urls[v])
			}
		}
		var cached shortlink.Link
		if err := json.Unmarshal([]byte(redisEntry(t, r, "hot-edit")), &cached); err != nil || cached.Version != versions || cached.URL != urls[versions] {
			t.Fatalf("Redis at the end: %+v, %v", cached, err)
		}
		time.Sleep(localTTL)
		for _, s := range []*shortlink.Service{a, b} {
			if l, err := s.Resolve(ctx, "hot-edit"); err != nil || l.Version != versions || l.URL != urls[versions] {
				t.Fatalf("a process after LocalTTL: %+v, %v", l, err)
			}
		}
	})
}

// PATCH /api/links/{code} and GET /api/links/{code}/history act for the
// link's owner only: to anyone else the code is 404 and nothing changes.
// The body is parsed as strictly as the create body, and the owner is the
// actor the history records.
func TestAPIUpdateAndHistory(t *testing.T) {
	s := newService(t, testenv.NewRedis(t), shortlink.Config{})
	api := ownersAPI(t, s)
	do := func(method, path, who, query, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, api.URL+path+"?as="+neturl.QueryEscape(who)+query, strings.NewReader(body))
		res, out := send(t, req, "9.9.9.9")
		return res.StatusCode, out
	}
	if code, _ := do("POST", "/api/links", "alice", "", `{"url":"https://example.com/a1","alias":"api-edit"}`); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	unchanged := func(when string) {
		t.Helper()
		if l, err := s.Resolve(context.Background(), "api-edit"); err != nil || l.URL != "https://example.com/a1" || l.Version != 1 {
			t.Fatalf("%s: %+v, %v", when, l, err)
		}
	}
	edit := `{"url":"https://example.com/a2","max_visits":0,"if_version":1}`
	for _, who := range []string{"bob", "Alice", "alice "} {
		if code, _ := do("PATCH", "/api/links/api-edit", who, "", edit); code != http.StatusNotFound {
			t.Errorf("%q edits alice's link: %d, want 404", who, code)
		}
		if code, _ := do("GET", "/api/links/api-edit/history", who, "", ""); code != http.StatusNotFound {
			t.Errorf("%q reads alice's history: %d, want 404", who, code)
		}
	}
	if code, _ := do("PATCH", "/api/links/api-edit", "nobody", "", edit); code != http.StatusUnauthorized {
		t.Fatalf("unauthorized edit: %d", code)
	}
	for _, body := range []string{
		`{"url":"https://example.com/a2","url":"https://evil.example/"}`, // a repeated key
		`{"URL":"https://example.com/a2"}`,                               // a case variant
		`{"url":"https://example.com/a2","label":"x"}`,                   // an unknown field
		`{"url":"https://example.com/a2"} {}`,                            // data after the object
		`{"url":""}`, `{}`, `{"ttl_seconds":0}`, `{"never_expires":true,"ttl_seconds":60}`, `{"redirect":303}`,
		`not json`,
	} {
		if code, _ := do("PATCH", "/api/links/api-edit", "alice", "", body); code != http.StatusBadRequest {
			t.Errorf("body %s: %d, want 400", body, code)
		}
	}
	unchanged("after the refused edits")
	code, body := do("PATCH", "/api/links/api-edit", "alice", "", edit)
	if code != http.StatusOK || body["url"] != "https://example.com/a2" || body["version"] != 2.0 || body["short_url"] != "https://sho.rt/api-edit" {
		t.Fatalf("alice edits: %d %v", code, body)
	}
	if res := get(t, api.URL+"/api-edit", "8.8.8.8"); res.StatusCode != http.StatusFound || res.Header.Get("Location") != "https://example.com/a2" {
		t.Fatalf("redirect after the edit: %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	if code, _ := do("PATCH", "/api/links/api-edit", "alice", "", `{"url":"https://example.com/a3","if_version":1}`); code != http.StatusConflict {
		t.Fatalf("a stale if_version: %d, want 409", code)
	}
	if code, _ := do("PATCH", "/api/links/api-edit", "alice", "", `{"never_expires":true,"redirect":301}`); code != http.StatusOK {
		t.Fatalf("a second edit: %d", code)
	}
	code, body = do("GET", "/api/links/api-edit/history", "alice", "&limit=1", "")
	revs, _ := body["revisions"].([]any)
	if code != http.StatusOK || len(revs) != 1 || body["next_before"] != 3.0 {
		t.Fatalf("history page 1: %d %v", code, body)
	}
	if rev := revs[0].(map[string]any); rev["version"] != 3.0 || rev["actor"] != "alice" {
		t.Fatalf("revision: %v", rev)
	}
	code, body = do("GET", "/api/links/api-edit/history", "alice", "&limit=1&before=3", "")
	revs, _ = body["revisions"].([]any)
	if code != http.StatusOK || len(revs) != 1 || body["next_before"] != nil || revs[0].(map[string]any)["version"] != 2.0 {
		t.Fatalf("history page 2: %d %v", code, body)
	}
	for _, q := range []string{"&limit=0", "&limit=101", "&limit=x", "&before=1&before=2", "&before=-1"} {
		if code, _ := do("GET", "/api/links/api-edit/history", "alice", q, ""); code != http.StatusBadRequest {
			t.Errorf("history%s: %d, want 400", q, code)
		}
	}
}

// An edit right after a first read: the read's fill of the local cache may
// still wait in ristretto's buffer when the edit puts the new version there,
// and ristretto keeps the first of two new entries of one key. The edit
// waits for the buffer first, so the next read is of the new version.
func TestUpdateRightAfterAFirstRead(t *testing.T) {
	r := testenv.NewRedis(t)
	s := newServiceOn(t, r, testenv.NewSQL(t), shortlink.Config{TablesPerDB: 16})
	ctx := context.Background()
	for i := range 200 {
		alias := "first-read-" + strconv.Itoa(i)
		if _, err := s.Shorten(ctx, "https://example.com/old", shortlink.Options{Alias: alias}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Resolve(ctx, alias); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, alias, shortlink.Update{URL: new("https://example.com/new")}); err != nil {
			t.Fatal(err)
		}
		if l, err := s.Resolve(ctx, alias); err != nil || l.URL != "https://example.com/new" {
			t.Fatalf("%s after its edit: %+v, %v", alias, l, err)
		}
	}
}
