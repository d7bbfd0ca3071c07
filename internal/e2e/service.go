// Package e2e drives the real leasesvc binary over HTTP: it builds
// cmd/leasesvc (or another command of the module, such as leasectl) once
// per test process, runs it on a free loopback port with the environment a
// test gives, can freeze it, and checks the lease flows of docs/contract.md §3–4
// against it. The memory, Firestore and Spanner tests, the MCP tests and
// the SDK conformance tests share it.
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
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var builds struct {
	mu   sync.Mutex
	pkgs map[string]*built
}

// built is one package's binary, built once per test process.
type built struct {
	once sync.Once
	path string
	err  error
}

// Build returns the path of a binary built from the package pkg of this
// module, such as "./cmd/leasectl", built once per test process.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	builds.mu.Lock()
	if builds.pkgs == nil {
		builds.pkgs = map[string]*built{}
	}
	b := builds.pkgs[pkg]
	if b == nil {
		b = &built{}
		builds.pkgs[pkg] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, err := os.MkdirTemp("", "leasesvc-e2e-")
		if err != nil {
			b.err = fmt.Errorf("temp dir: %w", err)
			return
		}
		b.path = filepath.Join(dir, path.Base(pkg))
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Binary returns the path of a leasesvc binary built from this module, built
// once per test process: Build(t, "./cmd/leasesvc").
func Binary(t testing.TB) string {
	t.Helper()
	return Build(t, "./cmd/leasesvc")
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
// answers. The process is killed when the test ends, if still running
// (thawed first if it was frozen).
func StartService(t testing.TB, env map[string]string) *Service {
	t.Helper()
	s := &Service{t: t, env: env}
	// The port is free when chosen, and another process (a test package
	// running beside this one) may take it before the binary listens:
	// then choose another.
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		s.port = port
		if s.start() {
			break
		}
		s.Kill()
		if attempt == 5 {
			t.Fatalf("leasesvc: 5 ports in a row were taken before it listened on them:\n%s", s.out.String())
		}
	}
	t.Cleanup(s.Kill)
	return s
}

// start runs the binary on s.port and waits until it answers /healthz; it
// reports false, and leaves the process to be killed, when another
// process answers on the port (the port was taken before it listened).
func (s *Service) start() bool {
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
				if listens(s.cmd.Process.Pid, s.port) {
					return true
				}
				if !s.running() || time.Now().After(deadline) {
					return false
				}
			}
		}
		select {
		case <-s.done:
			if strings.Contains(s.out.String(), "address already in use") {
				return false // the port was taken before it listened
			}
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

// Pid returns the process id of the running process (it changes on
// Restart), for a test that signals it from outside, such as a client
// suite that freezes it.
func (s *Service) Pid() int { return s.cmd.Process.Pid }

// Freeze stops the process with SIGSTOP, as a paused VM or a stalled
// backend looks to its clients, failing the test if it cannot. Thaw, Stop,
// Kill and the end of the test resume it.
//
// It returns once every thread of the process has stopped: the signal is
// delivered asynchronously, and a thread still running a moment after
// kill(2) returned could read a frame the test meant to leave waiting in
// the socket (TestPausedResumeFirestoreEvents saw B answer a "late" resume
// that way, once, on a loaded machine).
func (s *Service) Freeze(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP leasesvc: %v", err)
	}
	if err := waitStopped(s.cmd.Process.Pid, 10*time.Second); err != nil {
		t.Fatalf("SIGSTOP leasesvc: %v", err)
	}
}

// waitStopped waits until every thread of pid is stopped (state T in
// /proc/pid/task/*/stat), for at most limit.
func waitStopped(pid int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		running, err := runningThreads(pid)
		if err != nil {
			return err
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d: %d threads still running %v after SIGSTOP", pid, running, limit)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond) // polling the kernel's view; no event tells of a stop
	}
}

// runningThreads counts the threads of pid that are not stopped.
func runningThreads(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("read the threads of process %d: %w", pid, err)
	}
	n := 0
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread exited
		}
		// The state follows the command name, which is in parentheses
		// and may itself hold spaces or parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			return 0, fmt.Errorf("parse %s/%s/stat: %q", dir, task.Name(), stat)
		}
		if st := stat[i+2]; st != 'T' && st != 't' {
			n++
		}
	}
	return n, nil
}

// Thaw resumes a frozen process with SIGCONT; it does nothing to a running
// one. The error is that of the signal, such as for a process that has
// exited.
func (s *Service) Thaw() error {
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT leasesvc: %w", err)
	}
	return nil
}

// Stop sends SIGTERM (thawing a frozen process first) and waits for the
// process to exit; it returns the exit error (nil for a clean exit) and how
// long the exit took.
func (s *Service) Stop() (time.Duration, error) {
	s.t.Helper()
	start := time.Now()
	if !s.running() {
		return 0, s.err
	}
	_ = s.Thaw() // a stopped process would not act on SIGTERM
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

// Kill stops the process with SIGKILL, as a crash would (thawing it first
// if it was frozen).
func (s *Service) Kill() {
	if s.running() {
		_ = s.Thaw()
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
	if !s.start() {
		s.t.Fatalf("leasesvc restarted on port %d, which another process took:\n%s", s.port, s.out.String())
	}
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
	mu      sync.Mutex
	b       bytes.Buffer
	changes Changes
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.b.Write(p)
	b.mu.Unlock()
	b.changes.Notify()
	return n, err
}

// Await returns true once cond holds of what was written, testing it now
// and after each write, or false when limit passes first.
func (b *SyncBuffer) Await(limit time.Duration, cond func(string) bool) bool {
	return b.changes.Await(limit, func() bool { return cond(b.String()) })
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// listens reports whether process pid has a listening TCP socket on port
// (Linux: /proc/net/tcp{,6} and the process's file descriptors).
func listens(pid, port int) bool {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); ok && err == nil && int(p) == port {
				inodes[fields[9]] = true
			}
		}
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		link, err := os.Readlink(dir + "/" + fd.Name())
		if err == nil && strings.HasPrefix(link, "socket:[") && inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			return true
		}
	}
	return false
}
