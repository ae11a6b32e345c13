//go:build !linux

package backend

import "os/exec"

// dieWithParent has no portable equivalent outside Linux: Close (or Main in
// tests) stops spawned servers.
func dieWithParent(*exec.Cmd) {}
