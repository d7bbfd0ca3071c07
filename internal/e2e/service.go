// Package e2e drives the real leasesvc binary over HTTP: it builds
// cmd/leasesvc once per test process, runs it on a free loopback port with
// the environment a test gives, and checks the lease flows of docs/contract.md §3–4
// against it. The memory, Firestore and Spanner tests share it.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
)

var build struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of a leasesvc binary built from this module, built
// once per test process.
func Binary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, err := os.MkdirTemp("", "leasesvc-e2e-")
		if err != nil {
			build.err = fmt.Errorf("temp dir: %w", err)
			return
		}
		build.path = filepath.Join(dir, "leasesvc")
		cmd := exec.Command("go", "build", "-o", build.path, "./cmd/leasesvc")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/leasesvc: %w\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// Service is one running leasesvc process.
type Service struct {
	// URL is the service's base URL, such as http://127.0.0.1:41234.
	URL string

	t    testing.TB
	cmd  *exec.Cmd
	out  *SyncBuffer
	done chan struct{}
	err  error // the process's exit error, once done is closed
	env  map[string]string
	port int
}

// StartService runs the leasesvc binary with env added to the test
// process's environment (PORT is chosen here) and waits until /healthz
// answers. The process is killed when the test ends, if still running.
func StartService(t testing.TB, env map[string]string) *Service {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	s := &Service{t: t, env: env, port: port}
	s.start()
	t.Cleanup(func() {
		if s.running() {
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
	return s
}

func (s *Service) start() {
	t := s.t
	t.Helper()
	s.URL = "http://127.0.0.1:" + strconv.Itoa(s.port)
	s.cmd = exec.Command(Binary(t))
	s.cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(s.port))
	for k, v := range s.env {
		s.cmd.Env = append(s.cmd.Env, k+"="+v)
	}
	s.out = &SyncBuffer{}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	// If the test process dies (a panic, -timeout, SIGKILL), so does the service.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start leasesvc: %v", err)
	}
	s.done = make(chan struct{})
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-s.done:
			t.Fatalf("leasesvc exited during start-up: %v\n%s", s.err, s.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("leasesvc did not answer /healthz in 30s:\n%s", s.out.String())
		}
	}
}

func (s *Service) running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Output returns what the process has written to stdout and stderr.
func (s *Service) Output() string { return s.out.String() }

// Stop sends SIGTERM and waits for the process to exit; it returns the exit
// error (nil for a clean exit) and how long the exit took.
func (s *Service) Stop() (time.Duration, error) {
	s.t.Helper()
	start := time.Now()
	if !s.running() {
		return 0, s.err
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("SIGTERM: %w", err)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return time.Since(start), errors.New("leasesvc did not exit within 30s of SIGTERM")
	}
	return time.Since(start), s.err
}

// Kill stops the process with SIGKILL, as a crash would.
func (s *Service) Kill() {
	if s.running() {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Restart stops the process (SIGTERM) and starts it again on the same port
// with the same environment.
func (s *Service) Restart() {
	s.t.Helper()
	if _, err := s.Stop(); err != nil {
		s.t.Fatalf("stop leasesvc: %v\n%s", err, s.out.String())
	}
	s.start()
}

func freePort() (int, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers and a reader,
// such as a process's output or a handler's log.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
