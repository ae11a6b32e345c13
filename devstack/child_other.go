//go:build !linux

package devstack

import "os/exec"

// dieWithParent has no portable equivalent outside Linux: Close (or Main in
// tests) stops spawned servers.
func dieWithParent(*exec.Cmd) {}
