package testenv_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoCalendarInTests is the lint that keeps the suite off the calendar.
// In every _test.go file of the repository:
//
//   - time.Now, time.Since and time.Until are not read: tests take the wall
//     clock from testenv.Now (and testenv.Since), which CI shifts by
//     CASEBOOK_TEST_CLOCK_OFFSET, so a test that only passes near today
//     fails there and not on some later day;
//   - a socket or context deadline (SetDeadline, SetReadDeadline,
//     SetWriteDeadline, context.WithDeadline) is not built from testenv.Now,
//     which the offset moves away from the clock the kernel keeps;
//   - time.Date is not called with a literal year: a fixed date ages out (a
//     board's lifetime, a sign-in key's PEXPIREAT, a packet's expiry all
//     reach Redis, whose clock no offset moves). A date a test needs (a DST
//     edge, a year's end) is built from testenv.Now's year.
//
// An Example function may read time.Now: it is the user's own code, as
// pkg.go.dev shows it, and runs on its own clock throughout.
//
// A line that must break a rule says why in a comment on it or the line
// above: "// wall clock: …" (devstack's own tests cannot import testenv) or
// "// calendar: …" (a fixed date that reaches no server and no clock).
func TestNoCalendarInTests(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	var files, problems []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		files = append(files, rel)
		found, err := calendarUses(path)
		for _, p := range found {
			problems = append(problems, rel+":"+p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 50 {
		t.Fatalf("read only %d test files under %s: the walk is broken", len(files), root)
	}
	if len(problems) > 0 {
		t.Errorf("%d calendar dependencies in tests (use testenv.Now / testenv.Since, and dates built from testenv.Now's year):\n%s",
			len(problems), strings.Join(problems, "\n"))
	}
}

// calendarUses returns "line: what" for every wall-clock read and fixed
// date in one test file that no comment excuses.
func calendarUses(path string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	timeName := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	if timeName == "" || timeName == "_" {
		return nil, nil
	}
	excused := map[int]string{} // line → the excuse's kind
	for _, g := range f.Comments {
		for _, c := range g.List {
			text := strings.TrimSpace(strings.TrimPrefix(c.Text, "//"))
			for _, kind := range []string{"wall clock:", "calendar:"} {
				if strings.HasPrefix(text, kind) {
					line := fset.Position(c.Slash).Line
					excused[line], excused[line+1] = kind, kind
				}
			}
		}
	}
	type span struct{ from, to token.Pos }
	var examples []span
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") {
			examples = append(examples, span{fn.Pos(), fn.End()})
		}
	}
	inExample := func(pos token.Pos) bool {
		for _, e := range examples {
			if e.from <= pos && pos < e.to {
				return true
			}
		}
		return false
	}
	var out []string
	report := func(pos token.Pos, kind, what string) {
		if kind == "wall clock:" && inExample(pos) {
			return
		}
		line := fset.Position(pos).Line
		if excused[line] != kind {
			out = append(out, fmt.Sprintf("%d: %s", line, what))
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && id.Name == timeName {
				switch n.Sel.Name {
				case "Now", "Since", "Until":
					report(n.Pos(), "wall clock:", "time."+n.Sel.Name+" reads the wall clock; use testenv.Now / testenv.Since")
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || len(n.Args) == 0 {
				return true
			}
			switch sel.Sel.Name {
			case "SetDeadline", "SetReadDeadline", "SetWriteDeadline", "WithDeadline":
				if readsTestClock(n) {
					report(n.Pos(), "wall clock:", sel.Sel.Name+" on testenv.Now: a socket or context deadline is on the real clock (time.Now, excused with // wall clock:)")
				}
			}
			if sel.Sel.Name != "Date" {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == timeName {
				if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Kind == token.INT {
					report(n.Pos(), "calendar:", "time.Date("+lit.Value+", …) is a fixed date; build it from testenv.Now().Year()")
				}
			}
		}
		return true
	})
	return out, nil
}

// readsTestClock reports whether call's arguments read testenv.Now.
func readsTestClock(call *ast.CallExpr) bool {
	found := false
	for _, arg := range call.Args {
		ast.Inspect(arg, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Now" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "testenv" {
					found = true
				}
			}
			return !found
		})
	}
	return found
}
