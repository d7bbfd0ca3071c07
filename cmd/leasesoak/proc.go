package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat: USER_HZ,
// which is 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// procSample is what /proc says of a process at one instant.
type procSample struct {
	at      time.Time
	cpu     time.Duration // user + system time so far
	rssKiB  int64         // VmRSS
	threads int
	fds     int
}

// sampleProc reads /proc/PID/stat, /proc/PID/status and /proc/PID/fd.
func sampleProc(pid int) (procSample, error) {
	s := procSample{at: time.Now()}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("read stat of %d: %w", pid, err)
	}
	// pid (comm) state ppid ... utime is field 14, stime 15 (1-based); comm
	// may hold spaces, so count from the last ')'.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return s, fmt.Errorf("stat of %d: no ')' in %q", pid, stat)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("stat of %d: %d fields after comm", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("stat of %d: utime %q stime %q", pid, f[11], f[12])
	}
	s.cpu = time.Duration(utime+stime) * clockTick
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("read status of %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		switch k {
		case "VmRSS":
			s.rssKiB, _ = strconv.ParseInt(fields[0], 10, 64)
		case "Threads":
			s.threads, _ = strconv.Atoi(fields[0])
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, fmt.Errorf("list fds of %d: %w", pid, err)
	}
	s.fds = len(fds)
	return s, nil
}

// slope is the least-squares slope of y over x.
func slope(x, y []float64) float64 {
	n := float64(len(x))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx += x[i]
		sy += y[i]
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// countGoroutines counts the goroutines of a Go traceback ("goroutine N
// [state]:" headers) and the most common top functions of their stacks.
func countGoroutines(dump string) (int, map[string]int) {
	n := 0
	tops := map[string]int{}
	lines := strings.Split(dump, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "goroutine ") || !strings.HasSuffix(l, ":") {
			continue
		}
		n++
		// The creator is a better name for what the goroutine is than the
		// runtime function at the top of its stack.
		top := ""
		for j := i + 1; j < len(lines) && lines[j] != ""; j++ {
			if strings.HasPrefix(lines[j], "created by ") {
				top = strings.TrimPrefix(lines[j], "created by ")
				if k := strings.Index(top, " in goroutine"); k >= 0 {
					top = top[:k]
				}
				break
			}
		}
		if top == "" && i+1 < len(lines) {
			top = lines[i+1]
		}
		tops[top]++
	}
	return n, tops
}
