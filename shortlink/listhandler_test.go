package shortlink_test

import (
	"bytes"
	"fmt"
	"net/http"
	neturl "net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/shortlink"
)

// GET /api/links lists the asking owner's links only, newest first, by
// pages and by tag; a cursor of another owner's listing, a garbled one or
// a repeated parameter is 400. POST /api/links/bulk makes each good link
// of the batch with the asking owner and reports each bad one with the
// status POST /api/links would give it; a batch too big is 400 and makes
// nothing.
func TestAPIListAndBulk(t *testing.T) {
	clk := newClock()
	s := newService(t, testenv.NewRedis(t), shortlink.Config{Now: clk.Now, CreateLimit: unlimited})
	api := ownersAPI(t, s)
	do := func(method, path, who, body string) (int, map[string]any) {
		t.Helper()
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		req, _ := http.NewRequest(method, api.URL+path+sep+"as="+neturl.QueryEscape(who), bytes.NewReader([]byte(body)))
		res, out := send(t, req, "9.9.9.9")
		return res.StatusCode, out
	}
	var links []string
	for i := range 5 {
		tags := `["Red"]`
		if i%2 == 1 {
			tags = `["blue", "red"]`
		}
		code, body := do("POST", "/api/links", "alice", fmt.Sprintf(`{"url":"https://example.com/%d","tags":%s}`, i, tags))
		if code != http.StatusCreated || body["tags"] == nil {
			t.Fatalf("create %d: %d %v", i, code, body)
		}
		links = append(links, body["code"].(string))
		clk.Add(time.Millisecond)
	}
	if code, _ := do("POST", "/api/links", "bob", `{"url":"https://example.com/bob","tags":["red"]}`); code != http.StatusCreated {
		t.Fatalf("bob's create: %d", code)
	}
	if code, body := do("POST", "/api/links", "alice", `{"url":"https://example.com/x","tags":["a\u0000b"]}`); code != http.StatusBadRequest {
		t.Fatalf("a bad tag: %d %v", code, body)
	}
	page := func(who, query string) (codes []string, next string) {
		t.Helper()
		code, body := do("GET", "/api/links?"+query, who, "")
		if code != http.StatusOK {
			t.Fatalf("list %s as %s: %d %v", query, who, code, body)
		}
		for _, l := range body["links"].([]any) {
			m := l.(map[string]any)
			if m["owner"] != who || m["short_url"] != "https://sho.rt/"+m["code"].(string) {
				t.Fatalf("listed for %s: %v", who, m)
			}
			codes = append(codes, m["code"].(string))
		}
		next, _ = body["next_cursor"].(string)
		return codes, next
	}
	newest := slices.Clone(links)
	slices.Reverse(newest)
	first, next := page("alice", "n=2")
	second, next2 := page("alice", "n=2&cursor="+neturl.QueryEscape(next))
	third, last := page("alice", "n=2&cursor="+neturl.QueryEscape(next2))
	if got := slices.Concat(first, second, third); !slices.Equal(got, newest) || last != "" {
		t.Fatalf("alice's pages %v %v %v (last cursor %q), want %v", first, second, third, last, newest)
	}
	if blue, _ := page("alice", "tag=BLUE"); !slices.Equal(blue, []string{links[3], links[1]}) {
		t.Fatalf("tag blue: %v", blue)
	}
	if all, _ := page("alice", ""); len(all) != 5 {
		t.Fatalf("the default page: %v", all)
	}
	if bobs, _ := page("bob", "tag=red"); len(bobs) != 1 {
		t.Fatalf("bob's links: %v", bobs)
	}
	for _, q := range []string{"cursor=" + neturl.QueryEscape(next), "cursor=garbage", "n=0", "n=101", "n=x", "n=1&n=2", "tag=a&tag=b", "tag=%09"} {
		if code, body := do("GET", "/api/links?"+q, "bob", ""); code != http.StatusBadRequest {
			t.Errorf("bob lists with %s: %d %v, want 400", q, code, body)
		}
	}
	if code, body := do("PATCH", "/api/links/"+links[0], "alice", `{"tags":["Blue"]}`); code != http.StatusOK || fmt.Sprint(body["tags"]) != "[blue]" {
		t.Fatalf("editing the tags: %d %v", code, body)
	}
	if blue, _ := page("alice", "tag=blue"); !slices.Equal(blue, []string{links[3], links[1], links[0]}) {
		t.Fatalf("tag blue after the edit: %v", blue)
	}
	if code, body := do("PATCH", "/api/links/"+links[0], "alice", `{"tags":[]}`); code != http.StatusOK || body["tags"] != nil {
		t.Fatalf("removing the tags: %d %v", code, body)
	}
	if code, _ := do("GET", "/api/links", "nobody", ""); code != http.StatusUnauthorized {
		t.Fatalf("an unauthorized list: %d", code)
	}

	bulk := `{"links":[{"url":"https://example.com/b1","tags":["bulk"]},{"url":"ftp://example.com/"},` +
		`{"url":"https://example.com/b3","alias":"bulk-3"},{"url":"https://example.com/b4","alias":"bulk-3"},{"url":"https://example.com/b5","ttl_seconds":0}]}`
	code, body := do("POST", "/api/links/bulk", "carol", bulk)
	if code != http.StatusOK {
		t.Fatalf("bulk: %d %v", code, body)
	}
	results := body["results"].([]any)
	want := []int{201, 400, 201, 409, 400}
	if len(results) != len(want) {
		t.Fatalf("bulk results %v", results)
	}
	for i, r := range results {
		m := r.(map[string]any)
		if int(m["status"].(float64)) != want[i] {
			t.Errorf("bulk item %d: %v, want status %d", i, m, want[i])
		}
		if want[i] == 201 && m["link"].(map[string]any)["owner"] != "carol" {
			t.Errorf("bulk item %d: %v", i, m)
		}
		if want[i] != 201 && (m["error"] == "" || m["link"] != nil) {
			t.Errorf("bulk item %d: %v", i, m)
		}
	}
	if carols, _ := page("carol", ""); len(carols) != 2 || !slices.Contains(carols, "bulk-3") {
		t.Fatalf("carol's links after the bulk: %v", carols)
	}
	big := `{"links":[` + strings.Repeat(`{"url":"https://example.com/"},`, shortlink.MaxBatch) + `{"url":"https://example.com/"}]}`
	if code, body := do("POST", "/api/links/bulk", "dave", big); code != http.StatusBadRequest {
		t.Fatalf("a batch too big: %d %v", code, body)
	}
	for _, b := range []string{`{"links":[]}`, `{"links":[{"url":"https://example.com/","color":1}]}`, `{}`, `[]`} {
		if code, body := do("POST", "/api/links/bulk", "dave", b); code != http.StatusBadRequest {
			t.Errorf("bulk %s: %d %v, want 400", b, code, body)
		}
	}
	if daves, _ := page("dave", ""); len(daves) != 0 {
		t.Fatalf("refused batches made %v", daves)
	}
}
