package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// instance is a leasesvc process started by this command.
type instance struct {
	cmd  *exec.Cmd
	base string // http://127.0.0.1:PORT
	addr string // 127.0.0.1:PORT
}

// start runs bin on a free port with the memory backend and no
// authentication, and waits until it answers /healthz.
func start(ctx context.Context, bin string, stderr io.Writer) (*instance, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "LEASESVC_BACKEND=memory", "LEASESVC_AUTH=none",
		"LEASESVC_LISTEN=127.0.0.1", "LEASESVC_LOG_LEVEL=error", "LEASESVC_RATE_LIMIT=0")
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	in := &instance{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	in.base = "http://" + in.addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(in.base + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return in, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			in.stop()
			return nil, fmt.Errorf("no answer on /healthz within 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rss is the process's resident memory in MiB.
func (in *instance) rss() (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", in.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("read VmRSS (Linux only): %w", err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", v, err)
			}
			return float64(kb) / 1024, nil
		}
	}
	return 0, errors.New("no VmRSS in /proc/PID/status")
}

// stop ends the process: SIGTERM, then SIGKILL after 10 s.
func (in *instance) stop() {
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = in.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = in.cmd.Process.Kill()
		<-done
	}
}
