//go:build linux

package main

import (
	"errors"
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

// treeScript is a CMD of three generations, each writing its pid to
// dir/NAME: gen1 (CMD, a shell) starts gen2 (a shell) which starts gen3
// (a sleep that ignores SIGTERM, so only SIGKILL ends it); and escaped, a
// sleep that left CMD's process group and session (setsid) and whose
// parent ended (a double fork). cp gets $LEASE_CHECKPOINT_FILE.
func treeScript(dir string) string {
	f := func(name string) string { return filepath.Join(dir, name) }
	put := func(name, value string) string { // written whole, then renamed
		return `echo ` + value + ` > ` + f(name) + `.tmp && mv ` + f(name) + `.tmp ` + f(name)
	}
	gen2 := `trap "" TERM; sleep 60 & ` + put("gen3", "$!") + `; trap - TERM; ` + put("gen2", "$$") + `; wait`
	return put("gen1", "$$") + `; ` + put("cp", `"$LEASE_CHECKPOINT_FILE"`) +
		`; sh -c '` + gen2 + `' & (setsid sleep 60 & ` + put("escaped", "$!") + `); wait`
}

// startTree starts leasectl (the binary bin) running treeScript for the
// lease name, waits until the tree is up, and returns leasectl, the tree's
// pids and the checkpoint file.
func startTree(t *testing.T, bin, url, name, ttl string, flags ...string) (*exec.Cmd, map[string]int, string, output) {
	t.Helper()
	dir := t.TempDir()
	// A file, not a pipe: Wait must not wait for CMD's tree to close it.
	out, err := os.Create(filepath.Join(dir, "output"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = out.Close() }()
	args := append([]string{"run", name, "--ttl", ttl, "--holder", "first", "--url", url}, flags...)
	cmd := exec.Command(bin, append(args, "--", "sh", "-c", treeScript(dir))...)
	cmd.Env = append(os.Environ(), "LEASESVC_TOKEN=", "LEASESVC_TOKEN_FILE=")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pids := map[string]int{}
	for _, g := range []string{"gen1", "gen2", "gen3", "escaped"} {
		pid, err := strconv.Atoi(waitFile(t, filepath.Join(dir, g)))
		if err != nil || !alive(pid) {
			t.Fatalf("%s: pid %d (%v) not running; output:\n%s", g, pid, err, output(out.Name()).String())
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		pids[g] = pid
	}
	return cmd, pids, waitFile(t, filepath.Join(dir, "cp")), output(out.Name())
}

// output is a file that leasectl writes its output to.
type output string

func (o output) String() string { b, _ := os.ReadFile(string(o)); return string(b) }

// living returns the processes of pids still running.
func living(pids map[string]int) []string {
	var l []string
	for g, pid := range pids {
		if alive(pid) {
			l = append(l, g+"="+strconv.Itoa(pid))
		}
	}
	return l
}

// TestRunGuardKillsTreeWhenLeasectlIsKilled: SIGKILL of leasectl run ends
// CMD's whole tree within 1 s, grandchildren, a process that ignores
// SIGTERM and one that left the process group included, and the term's
// checkpoint directory is removed.
func TestRunGuardKillsTreeWhenLeasectlIsKilled(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn", "LEASESVC_MIN_TTL": "200ms"})
	bin := e2e.Build(t, "./cmd/leasectl")
	leasectl, pids, cp, out := startTree(t, bin, svc.URL, e2e.UniqueName("guard-kill"), "2s")
	if err := leasectl.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = leasectl.Wait()
	if took, ok := e2e.Poll(time.Second-time.Since(killed), 10*time.Millisecond, func() bool { return len(living(pids)) == 0 }); !ok {
		t.Fatalf("still running 1s after leasectl's SIGKILL: %v; output:\n%s", living(pids), out.String())
	} else {
		t.Logf("CMD's tree gone %v after leasectl's SIGKILL", took)
	}
	if _, ok := e2e.Poll(5*time.Second, 10*time.Millisecond, func() bool {
		_, err := os.Stat(filepath.Dir(cp))
		return os.IsNotExist(err)
	}); !ok {
		t.Fatalf("checkpoint directory %s still there 5s after leasectl's SIGKILL", filepath.Dir(cp))
	}
}

// TestRunGuardHoldsDeadlineWhenLeasectlIsFrozen: a leasectl run that is
// stopped (SIGSTOP) renews nothing; its guard ends CMD's whole tree before
// the safe deadline, while the service still holds the lease for it, so
// the next holder never overlaps with it. Resumed, leasectl exits 4.
func TestRunGuardHoldsDeadlineWhenLeasectlIsFrozen(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn", "LEASESVC_MIN_TTL": "200ms"})
	bin := e2e.Build(t, "./cmd/leasectl")
	name := e2e.UniqueName("guard-stop")
	// --exit-on-loss: the resumed leasectl exits 4 rather than campaign
	// again (TestRunCampaignsAgainAfterALostTerm).
	leasectl, pids, _, out := startTree(t, bin, svc.URL, name, "3s", "--exit-on-loss")
	// Renewals extend the guard's deadline: the tree outlives the first.
	if _, died := e2e.Poll(3500*time.Millisecond, 50*time.Millisecond, func() bool { return len(living(pids)) != len(pids) }); died {
		t.Fatalf("only %v running while leasectl renews; output:\n%s", living(pids), out.String())
	}
	if err := leasectl.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	died, ok := e2e.Poll(5*time.Second, 10*time.Millisecond, func() bool { return len(living(pids)) == 0 })
	if !ok {
		t.Fatalf("still running 5s after leasectl was frozen with a 3s TTL: %v; output:\n%s", living(pids), out.String())
	}
	c := e2e.Client{URL: svc.URL}
	r := c.Get(t, "/v1/leases/"+name)
	if r.Body["held"] != true || r.Token() != 1 {
		t.Fatalf("when CMD's tree was gone (%v after SIGSTOP) the lease was %s; want still held by the first holding", died, r.Raw)
	}
	t.Logf("CMD's tree gone %v after leasectl's SIGSTOP, the lease still held: %s", died, r.Raw)
	r = c.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"second","ttlMs":3000,"waitMs":10000}`)
	if r.Token() != 2 {
		t.Fatalf("second acquire: %s", r.Raw)
	}
	if l := living(pids); len(l) > 0 {
		t.Fatalf("alive when the second holder acquired: %v", l)
	}
	if err := leasectl.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- leasectl.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitLost {
			t.Fatalf("resumed leasectl: %v, want exit %d; output:\n%s", err, exitLost, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("resumed leasectl did not exit; output:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "safe deadline") {
		t.Errorf("leasectl's output names no safe deadline:\n%s", out.String())
	}
}

// TestRunStopsWhatCmdLeftRunning: when CMD ends by itself, what it started
// in the background is stopped before the lease is released and leasectl
// exits with CMD's status: it would lead without a lease.
func TestRunStopsWhatCmdLeftRunning(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn", "LEASESVC_MIN_TTL": "200ms"})
	dir := t.TempDir()
	bg := filepath.Join(dir, "bg")
	script := `sleep 60 & echo $! > ` + bg + `; exit 3`
	_, errOut, code := ctl(t, svc.URL, "run", e2e.UniqueName("leftover"), "--ttl", "2s", "--", "sh", "-c", script)
	if code != 3 {
		t.Fatalf("run: exit %d, want CMD's 3; stderr:\n%s", code, errOut)
	}
	b, err := os.ReadFile(bg)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if pid <= 0 || alive(pid) {
		t.Fatalf("CMD's background process %d still running after leasectl exited", pid)
	}
}
