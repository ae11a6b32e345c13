package main

import (
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/casebook-dev/casebook/internal/browsertest"
)

// The stats page renders in a real headless browser, served with its
// Content-Security-Policy: the chart is drawn (a bar per hour, this hour's
// bars tall, styled by the page's own stylesheet, which the policy lets
// through by its hash), every table row is visible, the forged UTM values
// are text, no script exists, nothing else is fetched, and no error or
// warning is logged (a policy violation would be).
func TestStatsPageInBrowser(t *testing.T) {
	f := newPageFixture(t)
	pageURL := f.srv.URL + "/api/links/" + f.code + "/stats.html"
	b := browsertest.Open(t, "the stats page", func(url string) bool { return url == pageURL })
	ctx := b.Ctx
	// The key as a browser sends it: in the Authorization header.
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": "Bearer " + testKey}}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL), chromedp.WaitReady(chromedp.CSS("body"))); err != nil {
		t.Fatal(err)
	}
	eval := func(js string) int { t.Helper(); return browsertest.Eval[int](t, b, js) }
	text := func(js string) string { t.Helper(); return browsertest.Eval[string](t, b, js) }
	if n := eval(`(() => { const r = document.querySelector("svg.chart").getBoundingClientRect(); return r.width > 300 && r.height > 100 ? 1 : 0 })()`); n != 1 {
		t.Errorf("the chart is not drawn: %s", text(`JSON.stringify(document.querySelector("svg.chart").getBoundingClientRect())`))
	}
	if n := eval(`document.querySelectorAll("svg.chart g.bar").length`); n != 25 {
		t.Errorf("%d bars, want 25 (the last 24 hours and this one)", n)
	}
	// This hour's people and bots, as tall as their counts say, beside each other in scale.
	people := eval(`Math.round(document.querySelector("svg.chart g.bar:last-of-type rect.people").getBoundingClientRect().height)`)
	bots := eval(`Math.round(document.querySelector("svg.chart g.bar:last-of-type rect.bots").getBoundingClientRect().height)`)
	if people < 20 || bots < 5 || people < 2*bots {
		t.Errorf("this hour's bars are %d px (people) and %d px (bots) high, want %d:%d", people, bots, f.people, f.bots)
	}
	if fill := text(`getComputedStyle(document.querySelector("rect.people")).fill`); fill != "rgb(37, 99, 235)" {
		t.Errorf("people's bars are %s: the page's style was not applied", fill)
	}
	rows := eval(`document.querySelectorAll("table tr").length`)
	visible := eval(`[...document.querySelectorAll("table tr")].filter(r => { const b = r.getBoundingClientRect(); return b.width > 0 && b.height > 0 }).length`)
	if rows != 6+4+4+4+1+1+1 || visible != rows { // a header per table, and the rows of TestStatsPage's Breakdowns
		t.Errorf("%d table rows, %d visible, want 21 all visible", rows, visible)
	}
	if got := text(`document.querySelector("#dim-utm_source td.v").textContent`); got != f.sourceMarkup {
		t.Errorf("utm_source shows %q, want the text %q", got, f.sourceMarkup)
	}
	if n := eval(`document.scripts.length + document.images.length`); n != 0 {
		t.Errorf("%d scripts or images in the page", n)
	}
	if err := chromedp.Do(ctx, chromedp.Sleep(200*time.Millisecond)); err != nil { // for late errors
		t.Fatal(err)
	}
	b.Problems(t)
}
