// Package svcproc runs a leasesvc binary as a child process for the
// measuring tools (leasebench and its slow-readers scenario): on a free
// loopback port, with the environment given, until it answers a probe;
// and it reads the process's CPU time and resident memory from /proc.
package svcproc

import (
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

// Options say how to start the process.
type Options struct {
	// Bin is the leasesvc binary.
	Bin string
	// Env is added to this process's environment; PORT is set last.
	Env []string
	// Stdout and Stderr receive the child's (nil: discarded).
	Stdout, Stderr io.Writer
	// Probe is the path that must answer 200 before Start returns:
	// "/readyz" or "/healthz".
	Probe string
	// Client sends the probes (nil: http.DefaultClient).
	Client *http.Client
}

// Proc is a running leasesvc process.
type Proc struct {
	// URL is its base URL, http://127.0.0.1:PORT.
	URL string
	// Addr is its address, 127.0.0.1:PORT.
	Addr string

	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts the process on a free loopback port and waits, at most
// 30 s or until ctx ends, until Probe answers 200. The child is killed
// if this process dies (Pdeathsig).
func Start(ctx context.Context, o Options) (*Proc, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(o.Bin)
	cmd.Env = append(append(os.Environ(), o.Env...), "PORT="+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = orDiscard(o.Stdout), orDiscard(o.Stderr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Bin, err)
	}
	p := &Proc{Addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd, done: make(chan struct{})}
	p.URL = "http://" + p.Addr
	go func() { _ = cmd.Wait(); close(p.done) }()
	hc := o.Client
	if hc == nil {
		hc = http.DefaultClient
	}
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+o.Probe, nil)
		if err != nil {
			p.Stop(syscall.SIGKILL, 0)
			return nil, fmt.Errorf("probe %s: %w", o.Probe, err)
		}
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
			err = fmt.Errorf("%s answered %d", o.Probe, resp.StatusCode)
		}
		last = err
		select {
		case <-p.done:
			return nil, errors.New("the process exited during start-up")
		case <-ctx.Done():
			p.Stop(syscall.SIGKILL, 0)
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop(syscall.SIGKILL, 0)
			return nil, fmt.Errorf("no 200 on %s within 30s: %w", o.Probe, last)
		}
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// Pid returns the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stop sends sig and waits for the process to end; after grace (when not
// 0) it is killed.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) {
	_ = p.cmd.Process.Signal(sig)
	if grace <= 0 {
		<-p.done
		return
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's CPU times (100 on
// every Linux the tools run on).
const clockTick = 100

// CPUTime returns the user + system CPU time of process pid so far, from
// /proc/PID/stat.
func CPUTime(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu time: %w", err)
	}
	// The second field (comm) may hold spaces: count from its closing ')'.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("cpu time: malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("cpu time: short /proc stat")
	}
	// After comm: state(0) ppid pgrp session tty tpgid flags minflt cminflt
	// majflt cmajflt utime(11) stime(12).
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("cpu time: %w", err)
	}
	return time.Duration(ut+st) * time.Second / clockTick, nil
}

// RSS returns the resident set size of process pid in bytes, from
// /proc/PID/status (VmRSS; Linux only).
func RSS(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("rss: %w", err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("rss: %w", err)
				}
				return kb << 10, nil
			}
		}
	}
	return 0, errors.New("rss: no VmRSS")
}
