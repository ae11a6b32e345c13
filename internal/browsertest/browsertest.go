// Package browsertest opens a page in a headless Chromium for tests of the
// HTML that casebook serves or writes (the capacity plan's report, the
// shortlink example's stats page).
package browsertest

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

// Browser is a headless Chromium tab and what it reported.
type Browser struct {
	// Ctx runs chromedp actions in the tab; it ends with the test (or
	// after a minute).
	Ctx      context.Context
	mu       sync.Mutex
	problems []string
}

// Open starts a headless Chromium for t, to test what (named in the skip
// or failure message). Without a Chrome or Chromium binary on PATH the
// test is skipped on a developer's machine and fails in CI (CI set, or
// CASEBOOK_REQUIRE_REAL=1). From then on the browser records as problems
// every exception, console error, warning or assertion, error or warning
// log entry, failed load and request for a URL that fetched refuses.
func Open(t *testing.T, what string, fetched func(url string) bool) *Browser {
	t.Helper()
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		if os.Getenv("CI") != "" || testenv.RequireReal() {
			t.Fatalf("no chromium on PATH: CI needs it to test %s in a browser (apt-get install chromium)", what)
		}
		t.Skipf("no chromium on PATH: install it to test %s in a browser", what)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	ctx, cancel = chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancel)
	ctx, cancel = chromedp.NewContext(ctx)
	t.Cleanup(cancel)
	b := &Browser{Ctx: ctx}
	err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			desc := ""
			if d.Exception != nil {
				desc = d.Exception.Description
			}
			b.report("exception at %s:%d: %s %s", d.URL, d.LineNumber, d.Text, desc)
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning || e.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range e.Args {
					args = append(args, cmp.Or(string(a.Value), a.Description))
				}
				b.report("console.%s: %s", e.Type, strings.Join(args, " "))
			}
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError || e.Entry.Level == cdplog.EntryLevelWarning {
				b.report("log %s: %s %s", e.Entry.Level, e.Entry.Text, e.Entry.URL)
			}
		case *network.EventRequestWillBeSent:
			if !fetched(e.Request.URL) {
				b.report("fetched %s", e.Request.URL)
			}
		case *network.EventLoadingFailed:
			b.report("load failed: %s", e.ErrorText)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *Browser) report(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, fmt.Sprintf(format, args...))
}

// Problems fails t with every problem recorded so far.
func (b *Browser) Problems(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Error(p)
	}
}

// Eval runs js in the tab and returns its value, failing t if it cannot.
func Eval[T any](t *testing.T, b *Browser, js string) T {
	t.Helper()
	v, err := chromedp.Run(b.Ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}
