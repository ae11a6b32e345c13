package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/casebook-dev/casebook/internal/testenv"
)

// chromium finds a Chrome or Chromium binary. Without one the test is
// skipped on a developer's machine and fails in CI (CI set, or
// CASEBOOK_REQUIRE_REAL=1).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" || testenv.RequireReal() {
		t.Fatal("no chromium on PATH: CI needs it for the HTML report's browser test (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH: install it to test the HTML report in a browser")
	return ""
}

// The page renders in a real headless browser: it loads, every chart is
// drawn with its lines and points, nothing is fetched from anywhere, and
// no script error, exception or failed load is logged.
func TestHTMLReportInBrowser(t *testing.T) {
	bin := chromium(t)
	path := writePage(t, "rank.add,idgen.snowflake")

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx, cancel = chromedp.NewExecAllocator(ctx, opts...)
	defer cancel()
	ctx, cancel = chromedp.NewContext(ctx)
	defer cancel()

	var (
		mu       sync.Mutex
		problems []string
	)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			desc := ""
			if d.Exception != nil {
				desc = d.Exception.Description
			}
			report("exception at %s:%d: %s %s", d.URL, d.LineNumber, d.Text, desc)
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning || e.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range e.Args {
					args = append(args, cmp.Or(string(a.Value), a.Description))
				}
				report("console.%s: %s", e.Type, strings.Join(args, " "))
			}
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError || e.Entry.Level == cdplog.EntryLevelWarning {
				report("log %s: %s %s", e.Entry.Level, e.Entry.Text, e.Entry.URL)
			}
		case *network.EventRequestWillBeSent:
			if !strings.HasPrefix(e.Request.URL, "file://") {
				report("fetched %s", e.Request.URL)
			}
		case *network.EventLoadingFailed:
			report("load failed: %s", e.ErrorText)
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+path), chromedp.WaitReady(chromedp.CSS("body"))); err != nil {
		t.Fatal(err)
	}
	eval := func(js string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return n
	}
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
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
}
