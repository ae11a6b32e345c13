package shortlink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	neturl "net/url"
	"slices"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/shortlink"
)

// GET /api/links/{code}/stats: the owner reads the series and the
// breakdowns in the documented shapes; anyone else gets 404, nobody 401,
// and a bad parameter 400.
func TestAnalyticsStatsEndpoint(t *testing.T) {
	ctx := context.Background()
	s, clk, code := analyticsService(t, shortlink.Config{})
	api := ownersAPI(t, s)
	for _, ref := range []string{"https://Example.COM/a", "https://example.com/b", "https://other.example/"} {
		req, _ := http.NewRequest("GET", api.URL+"/"+code, nil)
		req.Header.Set("Referer", ref)
		req.Header.Set("User-Agent", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) Mobile/15E148")
		if res, _ := send(t, req, "10.0.0.1"); res.StatusCode != http.StatusFound {
			t.Fatalf("redirect: %d", res.StatusCode)
		}
	}
	req, _ := http.NewRequest("GET", api.URL+"/"+code, nil)
	req.Header.Set("User-Agent", "Googlebot/2.1")
	send(t, req, "10.0.0.2")
	if err := s.FlushAnalytics(ctx); err != nil {
		t.Fatal(err)
	}
	hour := clk.Now().Truncate(time.Hour)
	get := func(who, query string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", api.URL+"/api/links/"+code+"/stats?as="+neturl.QueryEscape(who)+query, nil)
		req.Header.Set("X-Test-IP", "10.0.0.9")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, body
	}
	keysOf := func(body []byte) []string {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	strict := func(body []byte, v any) {
		t.Helper()
		d := json.NewDecoder(bytesReader(body))
		d.DisallowUnknownFields()
		if err := d.Decode(v); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
	}

	from, to := hour.Add(-time.Hour).Format(time.RFC3339), hour.Add(time.Hour).Format(time.RFC3339)
	status, body := get("alice", "&from="+from+"&to="+to+"&step=1h")
	if status != http.StatusOK || !slices.Equal(keysOf(body), []string{"code", "from", "points", "step", "to"}) {
		t.Fatalf("series: %d %s", status, body)
	}
	var series struct {
		Code, Step string
		From, To   time.Time
		Points     []struct {
			Start        time.Time
			Clicks, Bots int64
		}
	}
	strict(body, &series)
	if series.Code != code || series.Step != "1h" || !series.From.Equal(hour.Add(-time.Hour)) || len(series.Points) != 2 ||
		!series.Points[1].Start.Equal(hour) || series.Points[1].Clicks != 3 || series.Points[1].Bots != 1 || series.Points[0].Clicks != 0 {
		t.Fatalf("series %+v", series)
	}
	var point map[string]json.RawMessage
	json.Unmarshal(mustRaw(t, body, "points", 0), &point)
	if len(point) != 3 || point["start"] == nil || point["clicks"] == nil || point["bots"] == nil {
		t.Fatalf("a point: %s", body)
	}

	status, body = get("alice", "&dim=referrer&n=1&from="+from+"&to="+to)
	if status != http.StatusOK || !slices.Equal(keysOf(body), []string{"code", "dim", "from", "to", "values"}) {
		t.Fatalf("breakdown: %d %s", status, body)
	}
	var bd struct {
		Code, Dim string
		From, To  time.Time
		Values    []shortlink.Count
	}
	strict(body, &bd)
	if bd.Dim != "referrer" || len(bd.Values) != 1 || bd.Values[0] != (shortlink.Count{Value: "example.com", Clicks: 2}) {
		t.Fatalf("breakdown %+v", bd)
	}
	// Defaults: the last 24 hours, and for a breakdown the last 30 days.
	if status, body = get("alice", ""); status != http.StatusOK {
		t.Fatalf("defaults: %d %s", status, body)
	}
	strict(body, &series)
	if len(series.Points) != 24 && len(series.Points) != 25 || series.Points[len(series.Points)-1].Clicks != 3 {
		t.Fatalf("default series: %d points, %+v", len(series.Points), series.Points[len(series.Points)-1])
	}
	if status, body = get("alice", "&dim=device"); status != http.StatusOK {
		t.Fatalf("default breakdown: %d %s", status, body)
	}
	strict(body, &bd)
	if len(bd.Values) != 2 || bd.Values[0] != (shortlink.Count{Value: "mobile", Clicks: 3}) || bd.Values[1] != (shortlink.Count{Value: "bot", Bots: 1}) {
		t.Fatalf("device breakdown %+v", bd.Values)
	}

	for _, who := range []string{"bob", "Alice", "alice "} {
		if status, _ := get(who, ""); status != http.StatusNotFound {
			t.Errorf("%q reads alice's stats: %d, want 404", who, status)
		}
	}
	if status, _ := get("nobody", ""); status != http.StatusUnauthorized {
		t.Errorf("nobody: %d, want 401", status)
	}
	for _, q := range []string{
		"&step=2h", "&step=", "&step=1h&step=24h", "&from=yesterday", "&from=" + to + "&to=" + from, "&to=2026-13-01T00:00:00Z",
		"&dim=browser", "&dim=", "&dim=referrer&n=0", "&dim=referrer&n=101", "&dim=referrer&n=x", "&n=5",
		"&from=2000-01-01T00:00:00Z&to=2026-01-01T00:00:00Z", "&from=" + from + "&from=" + from,
	} {
		if status, body := get("alice", q); status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", q, status, body)
		}
	}
	if st := s.AnalyticsStats(); st.Clicks != 4 {
		t.Errorf("the stats route counted clicks: %+v", st)
	}
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// mustRaw returns body's field name's element i.
func mustRaw(t *testing.T, body []byte, name string, i int) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	var xs []json.RawMessage
	if err := errors.Join(json.Unmarshal(body, &m), json.Unmarshal(m[name], &xs)); err != nil || len(xs) <= i {
		t.Fatalf("%s: no %s[%d] (%v)", body, name, i, err)
	}
	return xs[i]
}
