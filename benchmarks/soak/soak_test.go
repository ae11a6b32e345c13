package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestSoak runs the soak briefly on the test's backends (the real
// servers in CI): faults are injected, every block's invariants hold, and
// the report says so.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a soak takes about a minute")
	}
	var out, errs bytes.Buffer
	code := run(context.Background(), []string{"-duration", "10s", "-rate", "50"}, &out, &errs)
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errs.String())
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, block := range []string{"rank", "signin", "shortlink", "seckill", "feed", "hotlist"} {
		row := regexp.MustCompile(`(?m)^` + block + ` .*\s(\d+)\s+\d+\s+\d+\s+\d+\s+hold$`).FindStringSubmatch(out.String())
		if row == nil {
			t.Errorf("no row for %s whose invariants hold", block)
		} else if n, _ := strconv.Atoi(row[1]); n == 0 {
			t.Errorf("%s: nothing acknowledged", block)
		}
	}
	injected := 0
	for _, m := range regexp.MustCompile(`(?m)^(?:redis|sql) [a-zA-Z].*?\s(\d+)$`).FindAllStringSubmatch(out.String(), -1) {
		n, _ := strconv.Atoi(m[1])
		injected += n
	}
	if injected == 0 || !strings.Contains(out.String(), "goroutines:") || !strings.Contains(out.String(), "live heap:") {
		t.Errorf("no fault injected, or no growth report")
	}
}

// Bad arguments exit 2 and say why, before any backend is opened.
func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"-duration", "1s"}, {"-duration", "25h"}, {"-rate", "0"}, {"-rate", "10001"}, {"extra"}, {"-json"},
	} {
		var out, errs bytes.Buffer
		if code := run(context.Background(), args, &out, &errs); code != 2 || errs.Len() == 0 || strings.Contains(errs.String(), "blocks at") {
			t.Errorf("%q: exit %d, stderr %q; want 2 and the reason", args, code, errs.String())
		}
	}
}
