//go:build unix && !linux

package main

import (
	"os/exec"
	"syscall"
)

// ownGroup starts CMD in a process group of its own, so that signals reach
// everything it started. (On Linux, CMD's guard does this: guard_linux.go.)
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd)
}

// terminate sends SIGTERM to CMD's process group.
func terminate(cmd *exec.Cmd) { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }

// kill sends SIGKILL to CMD's process group.
func kill(cmd *exec.Cmd) { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

// statusOf is CMD's exit status, 128 + the signal that ended it.
func statusOf(cmd *exec.Cmd, _ error) int {
	st := cmd.ProcessState
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}
