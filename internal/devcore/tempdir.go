package devcore

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Spawned servers and SQLite files live in directories named
// "casebook-<pid>-<what>-<random>" under the system's temp dir. Close removes
// them; a process that died without closing (SIGKILL, a crash) leaves its
// own behind, and the next process to open a backend removes every such
// directory whose owner is gone.
const tempPrefix = "casebook-"

var sweepOnce sync.Once

// tempDir creates a directory for what this process is about to start.
func tempDir(what string) (string, error) {
	sweepOnce.Do(sweepStale)
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-%s-", tempPrefix, os.Getpid(), what))
	if err != nil {
		return "", fmt.Errorf("devstack: %s temp dir: %w", what, err)
	}
	return dir, nil
}

// sweepStale removes directories left by processes that no longer run.
func sweepStale() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, m := range matches {
		pid, ok := ownerOf(filepath.Base(m))
		if ok && pid != os.Getpid() && !alive(pid) {
			os.RemoveAll(m)
		}
	}
}

// ownerOf parses the pid out of "casebook-<pid>-…".
func ownerOf(name string) (int, bool) {
	rest := strings.TrimPrefix(name, tempPrefix)
	digits, _, found := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(digits)
	return pid, found && err == nil && pid > 0
}
