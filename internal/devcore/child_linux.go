package devcore

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill a spawned server when the process that
// spawned it dies without cleaning up (a test binary killed by its timeout,
// a harness cut off by a closed pipe).
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// alive reports whether process pid still exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
