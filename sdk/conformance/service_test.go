package conformance

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// repoRoot is the module's root directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// need finds tool on PATH; without it the test fails under CI=true and is
// skipped elsewhere, saying what to install.
func need(t testing.TB, tool, install string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err == nil {
		return p
	}
	msg := tool + " is not installed: " + install
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// service is one leasesvc process that the test may freeze (SIGSTOP).
type service struct {
	url  string
	cmd  *exec.Cmd
	out  *e2e.SyncBuffer
	done chan struct{}

	mu     sync.Mutex
	frozen bool
}

// startService runs the leasesvc binary on a free port with env added and
// waits for /healthz. It is killed when the test ends.
func startService(t testing.TB, env map[string]string) *service {
	t.Helper()
	port := freePort(t)
	s := &service{url: "http://127.0.0.1:" + strconv.Itoa(port), out: &e2e.SyncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(e2e.Binary(t))
	s.cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "LEASESVC_LOG_LEVEL=warn")
	for k, v := range env {
		s.cmd.Env = append(s.cmd.Env, k+"="+v)
	}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start leasesvc: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.resume()
		_ = s.cmd.Process.Kill()
		<-s.done
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.url + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-s.done:
			t.Fatalf("leasesvc exited during start-up:\n%s", s.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("leasesvc did not answer /healthz in 30s:\n%s", s.out.String())
		}
	}
}

// freeze stops the process with SIGSTOP, as a paused VM or a stalled
// backend would look to its clients.
func (s *service) freeze(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP leasesvc: %v", err)
	}
	s.frozen = true
}

// resume undoes freeze.
func (s *service) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		s.frozen = false
	}
}

// freePort returns a loopback port nobody listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
