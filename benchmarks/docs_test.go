package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const docsDir = "../docs"

// Every -explain block prints its estimate without measuring: no server is
// opened, and it returns at once.
func TestExplainEveryBlock(t *testing.T) {
	for _, name := range ExplainNames() {
		var out, errs bytes.Buffer
		if code := run(context.Background(), []string{"-explain", name}, &out, &errs); code != 0 {
			t.Fatalf("-explain %s: exit %d, stderr %q", name, code, errs.String())
		}
		if errs.Len() != 0 || !strings.Contains(out.String(), "| --- |") {
			t.Errorf("-explain %s: stderr %q, stdout without a table:\n%s", name, errs.String(), out.String())
		}
	}
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"-explain", "nosuch"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), "unknown block") {
		t.Errorf("-explain nosuch: exit %d, stderr %q", code, errs.String())
	}
}

// The five seed slips are flagged where their scenarios are explained.
func TestExplainFlagsTheSeedSlips(t *testing.T) {
	want := map[string][]string{
		"hotlist":   {"**peak events**", "**peak list reads**"},
		"redpacket": {"**storage per day**"},
		"feed":      {"**images per day**"},
		"shop":      {"**peak orders**"},
		"rank":      nil,
	}
	for block, slips := range want {
		var b bytes.Buffer
		if err := Explain(&b, block); err != nil {
			t.Fatal(err)
		}
		for _, s := range slips {
			if !strings.Contains(b.String(), s+": the seed says") {
				t.Errorf("-explain %s does not flag %s:\n%s", block, s, b.String())
			}
		}
		if n := strings.Count(b.String(), "× off."); n != len(slips) {
			t.Errorf("-explain %s flags %d figures, want %d", block, n, len(slips))
		}
	}
}

var explainBlock = regexp.MustCompile("(?s)<!-- explain:([a-z]+) -->\n(.*?)<!-- /explain -->")

// Each page's embedded estimate is exactly what -explain prints now.
func TestDocsEstimatesAreCurrent(t *testing.T) {
	for page, text := range docPages(t) {
		m := explainBlock.FindAllStringSubmatch(text, -1)
		if base := strings.TrimSuffix(page, ".md"); base != "README" {
			if _, ok := explainBlocks[base]; ok && len(m) == 0 {
				t.Errorf("docs/%s has no <!-- explain:%s --> … <!-- /explain --> block", page, base)
			}
		}
		for _, sub := range m {
			var want bytes.Buffer
			if err := Explain(&want, sub[1]); err != nil {
				t.Errorf("docs/%s: %v", page, err)
				continue
			}
			if sub[2] != want.String() {
				t.Errorf("docs/%s: the explain:%s block is stale; replace it with the output of `go run ./benchmarks -explain %s`", page, sub[1], sub[1])
			}
		}
	}
}

// Each block's page has a diagram.
func TestDocsHaveMermaid(t *testing.T) {
	for page, text := range docPages(t) {
		if page != "README.md" && !strings.Contains(text, "\n```mermaid\n") {
			t.Errorf("docs/%s has no ```mermaid block", page)
		}
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of docs/*.md names an existing file, and its #anchor
// a heading of that file.
func TestDocsLinksResolve(t *testing.T) {
	pages := docPages(t)
	for page, text := range pages {
		for _, m := range mdLink.FindAllStringSubmatch(stripCode(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := filepath.Join(docsDir, page)
			if file != "" {
				path = filepath.Join(docsDir, file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("docs/%s links %s: %v", page, target, err)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			body, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("docs/%s links %s: %v", page, target, err)
				continue
			}
			if !hasAnchor(string(body), anchor) {
				t.Errorf("docs/%s links %s: no heading with anchor #%s", page, target, anchor)
			}
		}
	}
}

func docPages(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no docs/*.md (%v)", err)
	}
	pages := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		pages[filepath.Base(p)] = string(b)
	}
	return pages
}

var fence = regexp.MustCompile("(?s)```.*?```")

// stripCode drops fenced blocks, whose brackets are not links.
func stripCode(s string) string { return fence.ReplaceAllString(s, "") }

// hasAnchor reports whether a heading of md has GitHub's anchor slug.
func hasAnchor(md, anchor string) bool {
	for line := range strings.SplitSeq(stripCode(md), "\n") {
		if h := strings.TrimLeft(line, "#"); h != line && strings.HasPrefix(h, " ") && slug(h) == anchor {
			return true
		}
	}
	return false
}

// slug is GitHub's heading anchor: lower case, spaces to hyphens, other
// punctuation dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
