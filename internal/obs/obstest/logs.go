package obstest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// Logs records what a block logs, for tests: Logger is the *slog.Logger to
// put in the block's Config.
type Logs struct {
	mu      sync.Mutex
	records []string
	Logger  *slog.Logger
}

// NewLogs makes a Logs that keeps every record at level Debug and above.
func NewLogs() *Logs {
	l := &Logs{}
	l.Logger = slog.New(&logHandler{logs: l})
	return l
}

// Lines returns each record as "LEVEL message key=value …", attributes
// in the order given (the logger's own, such as casebook.block, first).
func (l *Logs) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.records)
}

// Count returns how many records at level start with prefix
// ("WARN kafka: poison").
func (l *Logs) Count(prefix string) int {
	n := 0
	for _, r := range l.Lines() {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

type logHandler struct {
	logs  *Logs
	attrs []slog.Attr
}

func (*logHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	write := func(a slog.Attr) { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value.Resolve()) }
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(func(a slog.Attr) bool { write(a); return true })
	h.logs.mu.Lock()
	h.logs.records = append(h.logs.records, b.String())
	h.logs.mu.Unlock()
	return nil
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{logs: h.logs, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *logHandler) WithGroup(string) slog.Handler { return h } // the blocks use no groups
