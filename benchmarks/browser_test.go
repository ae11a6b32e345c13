package main

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/casebook-dev/casebook/internal/browsertest"
)

// The page renders in a real headless browser: it loads, every chart is
// drawn with its lines and points, nothing is fetched from anywhere, and
// no script error, exception or failed load is logged.
func TestHTMLReportInBrowser(t *testing.T) {
	path := writePage(t, "rank.add,idgen.snowflake")
	b := browsertest.Open(t, "the HTML report", func(url string) bool { return strings.HasPrefix(url, "file://") })
	ctx := b.Ctx

	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+path), chromedp.WaitReady(chromedp.CSS("body"))); err != nil {
		t.Fatal(err)
	}
	eval := func(js string) int { t.Helper(); return browsertest.Eval[int](t, b, js) }
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	charts := eval(`document.querySelectorAll("svg.chart").length`)
	drawn := eval(`[...document.querySelectorAll("svg.chart")].filter(s => {
		const r = s.getBoundingClientRect(), p = s.querySelector("path.series");
		return r.width > 100 && r.height > 100 && p && p.getTotalLength() > 10;
	}).length`)
	points := eval(`document.querySelectorAll("svg.chart circle").length`)
	if n := eval(`document.querySelectorAll("#summary tr").length`); n < 3 {
		t.Errorf("summary table has %d rows, want a header, the leaderboard and the total", n)
	}
	rows := eval(`document.querySelectorAll("#measurements tr").length`)
	if err := chromedp.Do(ctx, chromedp.Sleep(200*time.Millisecond)); err != nil { // for late errors: a deferred script, a lazy fetch
		t.Fatal(err)
	}
	if title != "casebook capacity plan" {
		t.Errorf("title %q", title)
	}
	if charts != 6 || drawn != charts || points < 20 { // 2 distributions, rank.add by workers, rank.top by shards
		t.Errorf("%d charts, %d drawn, %d points; want 6 charts all drawn", charts, drawn, points)
	}
	if rows != 1+2 {
		t.Errorf("measurements table has %d rows, want a header and 2", rows)
	}
	b.Problems(t)
}
