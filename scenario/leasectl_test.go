package scenario

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Environment of the child process.
const (
	childEnv    = "SCENARIO_CHILD"       // set: this process is the child
	childURLEnv = "SCENARIO_SERVICE_URL" // the service, reached directly
	childLogEnv = "SCENARIO_CHILD_LOG"   // where the child records its activity
)

// child is the CMD that leasectl runs: it ignores SIGTERM (so only SIGKILL
// stops it) and every 20ms reads its lease from the service, recording the
// serverTime of each answer: its activity, in server time.
func child() int {
	signal.Ignore(syscall.SIGTERM)
	f, err := os.OpenFile(os.Getenv(childLogEnv), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 1
	}
	url := os.Getenv(childURLEnv) + "/v1/leases/" + os.Getenv("LEASE_NAME")
	_, _ = fmt.Fprintf(f, "token %s holder %s\n", os.Getenv("LEASE_FENCING_TOKEN"), os.Getenv("LEASE_HOLDER"))
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(url)
		if err == nil {
			var l struct {
				ServerTime string `json:"serverTime"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&l)
			_ = resp.Body.Close()
			_, _ = fmt.Fprintln(f, l.ServerTime)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLeasectlRunStopsChildBeforeTakeover: `leasectl run` reaches the
// service through a proxy; its child ignores SIGTERM and keeps reading the
// lease straight from the service. The test cuts the proxy: leasectl must
// SIGKILL the child before another holder can acquire, which the test
// checks in server time: the child's last answer's serverTime is before
// the next holding's acquireTime.
func TestLeasectlRunStopsChildBeforeTakeover(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	bin := e2e.Build(t, "./cmd/leasectl")
	svc := e2e.StartService(t, serviceEnv)
	px := newProxy(t, svc.URL[len("http://"):])
	name := e2e.UniqueName("ctlrun")
	log := filepath.Join(t.TempDir(), "child.log")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// --exit-on-loss: since issue 38, run campaigns again after a lost term
	// unless told to exit (status 4), which this test measures.
	cmd := exec.Command(bin, "run", "--lease", name, "--ttl", ttl.String(), "--holder", "runner", "--exit-on-loss", "--", self)
	cmd.Env = append(os.Environ(), "LEASESVC_URL="+px.URL(), childEnv+"=1", childURLEnv+"="+svc.URL, childLogEnv+"="+log)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	eventually(t, 10*time.Second, "the child is active", func() bool { return len(readLog(t, log)) > 5 })
	b := campaign(t, newClient(t, svc.URL), name, "agent-b", ttl)
	time.Sleep(ttl) // leasectl renews through the proxy; b waits
	if b.leading.Load() {
		t.Fatal("b leads while leasectl holds the lease")
	}
	cut := time.Now()
	px.Cut()
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("leasectl did not exit within 10s of the cut; stderr:\n%s", stderr.String())
	}
	exitedAfter := time.Since(cut)
	var ee *exec.ExitError
	if !errors.As(runErr, &ee) || ee.ExitCode() != 4 {
		t.Errorf("leasectl run = %v, want exit status 4 (lease lost)", runErr)
	}
	if !strings.Contains(stderr.String(), "SIGKILL") {
		t.Errorf("leasectl did not say it sent SIGKILL:\n%s", stderr.String())
	}
	eventually(t, 10*time.Second, "b takes over", b.leading.Load)
	l, err := newClient(t, svc.URL).Get(t.Context(), name)
	if err != nil || l.Holder != "agent-b" || l.FencingToken != 2 {
		t.Fatalf("after the takeover: %+v, %v", l, err)
	}
	lines := readLog(t, log)
	if !strings.HasPrefix(lines[0], "token 1 holder runner") {
		t.Errorf("child's environment: %q", lines[0])
	}
	last, err := time.Parse(time.RFC3339Nano, lines[len(lines)-1])
	if err != nil {
		t.Fatalf("child's last line %q: %v", lines[len(lines)-1], err)
	}
	t.Logf("leasectl exited %v after the cut; the child's last activity (server time) came %v before b's acquireTime; leasectl said:\n%s",
		exitedAfter, l.AcquireTime.Sub(last), stderr.String())
	if !last.Before(l.AcquireTime) {
		t.Fatalf("the child was active at %v, not before b acquired at %v", last, l.AcquireTime)
	}
	// The child is gone: its log grows no more.
	n := len(lines)
	time.Sleep(200 * time.Millisecond)
	if m := len(readLog(t, log)); m != n {
		t.Fatalf("the child still runs: %d lines, then %d", n, m)
	}
}

// readLog returns the lines the child wrote.
func readLog(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			out = append(out, s)
		}
	}
	return out
}
