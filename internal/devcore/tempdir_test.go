package devcore

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A directory left by a process that died without cleaning up is removed by
// the next process; one whose owner still runs is kept.
func TestSweepStaleRemovesOnlyOrphans(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip("no `true` command to get a dead pid from")
	}
	orphan := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-test-x", tempPrefix, dead.Process.Pid))
	mine := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-test-y", tempPrefix, os.Getpid()))
	for _, d := range []string{orphan, mine} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
	}
	sweepStale()
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("orphan %s survived the sweep (%v)", orphan, err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("a live process's dir was swept: %v", err)
	}
	for name, want := range map[string]bool{"casebook-12-redis-abc": true, "casebook-x-redis": false, "casebook-0-a": false, "casebook-12": false} {
		if _, ok := ownerOf(name); ok != want {
			t.Errorf("ownerOf(%q) ok = %v, want %v", name, ok, want)
		}
	}
}
