package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writePage runs a short harness with -html on embedded backends and
// returns the page's path.
func writePage(t *testing.T, only string) string {
	t.Helper()
	t.Setenv("CASEBOOK_REDIS_ADDR", "")
	t.Setenv("CASEBOOK_MYSQL_DSN", "")
	path := filepath.Join(t.TempDir(), "report.html")
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"-only", only, "-duration", "20ms", "-html", path}, &out, &errs); code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, errs.String())
	}
	return path
}

// The page holds the plan's tables, one chart per measurement and two per
// sweep, and loads nothing from elsewhere; the text report is still printed.
func TestHTMLReport(t *testing.T) {
	path := writePage(t, "rank.add,idgen.snowflake")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, want := range []string{`id="measurements"`, "rank.add", "idgen.snowflake", "How cost grows with concurrency and with work",
		"rank.add by workers — ", "rank.top by shards — ", "class=\"sizings\"", "arithmetic", "leaderboard"} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// The summary and the machine come first, before any detail.
	summary, machine, details := strings.Index(html, `id="summary"`), strings.Index(html, `id="machine"`), strings.Index(html, `id="measurements"`)
	if summary < 0 || machine < summary || details < machine {
		t.Errorf("page does not open with the summary, then the machine (at %d, %d; measurements at %d)", summary, machine, details)
	}
	if !strings.Contains(html, "<td>leaderboard</td>") || !strings.Contains(html, "peak score writes/s (rank.add)") {
		t.Errorf("summary lacks the leaderboard's row and its binding load")
	}
	// Worker counts are integers on the sweep's axis.
	for _, tick := range []string{">1<", ">4<", ">16<", ">64<"} {
		if !strings.Contains(html, tick) {
			t.Errorf("sweep axis lacks the tick %s", tick)
		}
	}
	if strings.Contains(html, ">1.00<") || strings.Contains(html, ">16.0<") {
		t.Errorf("sweep axis prints worker counts as decimals")
	}
	if n := strings.Count(html, `<svg class="chart"`); n != 2+2+2 {
		t.Errorf("%d charts, want 2 distributions + 2 for the rank.add sweep + 2 for rank.top by shards", n)
	}
	for _, remote := range []string{"src=", "href=", "@import", "url("} {
		if strings.Contains(html, remote) {
			t.Errorf("page refers to another resource (%s)", remote)
		}
	}
	if entries, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".report.html.*")); len(entries) > 0 {
		t.Errorf("temporary files left: %v", entries)
	}
}

// An interrupted run writes no page and leaves no temporary file.
func TestHTMLNotWrittenWhenInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	var out, errs bytes.Buffer
	if code := run(ctx, []string{"-duration", "10ms", "-only", "idgen.snowflake", "-html", filepath.Join(dir, "r.html")}, &out, &errs); code != 1 {
		t.Fatalf("exit %d; stderr: %s", code, errs.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Fatalf("left %v", entries)
	}
}
