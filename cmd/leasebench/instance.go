package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// instance is a leasesvc process a session scenario started (from
// -leasesvc, with leasebench's environment, so on the same backend).
type instance struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// startInstance starts the leasesvc binary with leasebench's environment
// plus env, on a free port, and waits until /readyz answers.
func startInstance(ctx context.Context, b *bench, id string, env ...string) (*instance, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("instance %s: free port: %w", id, err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	logf, err := os.CreateTemp("", "leasebench-"+id+"-*.log")
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", id, err)
	}
	cmd := exec.Command(b.cfg.leasesvc)
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "LEASESVC_INSTANCE_ID="+id, "LEASESVC_LOG_LEVEL=warn")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("instance %s: start %s: %w", id, b.cfg.leasesvc, err)
	}
	in := &instance{url: "http://127.0.0.1:" + strconv.Itoa(port), cmd: cmd, done: make(chan struct{}), log: logf}
	go func() { _ = cmd.Wait(); close(in.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.url+"/readyz", nil)
		if resp, err := b.svc.hc.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return in, nil
			}
		}
		select {
		case <-in.done:
			return nil, fmt.Errorf("instance %s exited during start-up; log in %s", id, logf.Name())
		case <-ctx.Done():
			in.stop(syscall.SIGKILL)
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			in.stop(syscall.SIGKILL)
			return nil, fmt.Errorf("instance %s not ready in 30s; log in %s", id, logf.Name())
		}
	}
}

// stop sends sig and waits for the process to end (SIGKILL after 15 s).
func (in *instance) stop(sig syscall.Signal) {
	_ = in.cmd.Process.Signal(sig)
	select {
	case <-in.done:
	case <-time.After(15 * time.Second):
		_ = in.cmd.Process.Kill()
		<-in.done
	}
	_ = in.log.Close()
}

// pid returns the process id.
func (in *instance) pid() int { return in.cmd.Process.Pid }

// clockTick is USER_HZ, the unit of /proc/PID/stat's CPU times (100 on
// every Linux leasebench runs on).
const clockTick = 100

// cpuTime returns the user + system CPU time of process pid so far, from
// /proc/PID/stat.
func cpuTime(pid int) (time.Duration, error) {
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

// rss returns the resident set size of process pid in bytes, from
// /proc/PID/status (VmRSS).
func rss(pid int) (int64, error) {
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
