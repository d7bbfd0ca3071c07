//go:build linux

package main

import (
	"os/exec"
	"runtime"
	"syscall"
)

// dieWithParent makes the kernel SIGKILL CMD when leasectl dies, however it
// dies (SIGKILL, the OOM killer, a crashed container runtime), so that CMD
// never outlives the leasectl that watches its lease and a second leader
// cannot appear. The signal is sent when the thread that started CMD ends,
// so that thread is locked to its goroutine until CMD has been reaped (see
// lockThread). Go's fork checks, after setting the signal, that the parent
// is still the process that started the child, and kills the child if not:
// a leasectl killed during the start leaves no CMD behind either.
func dieWithParent(cmd *exec.Cmd) { cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL }

// lockThread keeps the calling goroutine on its thread until the returned
// func is called: CMD's parent-death signal follows that thread.
func lockThread() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
