//go:build !linux

package devcore

import "os/exec"

// dieWithParent has no portable equivalent outside Linux: Close (or Main in
// tests) stops spawned servers.
func dieWithParent(*exec.Cmd) {}

// alive cannot tell elsewhere: every owner is presumed alive, so stale
// directories are left for the system's temp cleaner.
func alive(int) bool { return true }
