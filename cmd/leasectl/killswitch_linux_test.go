//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// alive reports whether pid is a running process (a zombie waiting for a
// reaper is not).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// waitFile waits up to 20s for path to hold a line and returns it.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	var line string
	if _, ok := e2e.Poll(20*time.Second, 20*time.Millisecond, func() bool {
		b, err := os.ReadFile(path)
		line = strings.TrimSpace(string(b))
		return err == nil && strings.HasSuffix(string(b), "\n")
	}); !ok {
		t.Fatalf("%s not written within 20s", path)
	}
	return line
}

// TestRunKillSwitch: when leasectl run is killed with SIGKILL, its CMD dies
// with it, within 1 s and before a second leasectl run starts the next
// leader, so two leaders never run at once. Real binaries: leasesvc
// (memory) and leasectl.
func TestRunKillSwitch(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn", "LEASESVC_MIN_TTL": "200ms"})
	bin := e2e.Build(t, "./cmd/leasectl")
	dir := t.TempDir()
	name := e2e.UniqueName("killswitch")
	start := func(label string) *exec.Cmd {
		script := `echo "$$ $LEASE_FENCING_TOKEN" > ` + filepath.Join(dir, label) + `.tmp && mv ` + filepath.Join(dir, label) + `.tmp ` + filepath.Join(dir, label) + ` && exec sleep 60`
		cmd := exec.Command(bin, "run", "--lease", name, "--ttl", "2s", "--holder", label, "--url", svc.URL, "--", "sh", "-c", script)
		cmd.Env = append(os.Environ(), "LEASESVC_TOKEN=", "LEASESVC_TOKEN_FILE=")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	first := start("first")
	f := strings.Fields(waitFile(t, filepath.Join(dir, "first")))
	pid, _ := strconv.Atoi(f[0])
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if f[1] != "1" || !alive(pid) {
		t.Fatalf("first CMD: %v, alive %v", f, alive(pid))
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	took, ok := e2e.Poll(time.Second, 10*time.Millisecond, func() bool { return !alive(pid) })
	if !ok {
		t.Fatalf("CMD (pid %d) still running 1s after leasectl was killed with SIGKILL", pid)
	}
	t.Logf("CMD gone %v after leasectl's SIGKILL", took)
	start("second")
	g := strings.Fields(waitFile(t, filepath.Join(dir, "second")))
	if g[1] != "2" {
		t.Fatalf("second CMD: %v, want fencing token 2", g)
	}
	if alive(pid) {
		t.Fatalf("first CMD (pid %d) alive when the second leader started", pid)
	}
}
