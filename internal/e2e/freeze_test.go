package e2e

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestWaitStopped: waitStopped returns once a process is stopped, and
// fails for one that runs.
func TestWaitStopped(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	if err := waitStopped(pid, 20*time.Millisecond); err == nil {
		t.Fatal("waitStopped returned for a process that runs")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := waitStopped(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := runningThreads(pid); err != nil || n != 0 {
		t.Fatalf("runningThreads after the stop: %d, %v; want 0", n, err)
	}
}
