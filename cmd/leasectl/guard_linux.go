//go:build linux

package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasesvc/leasesvc/client"
)

// guardCommand is the hidden first argument with which leasectl run starts
// itself as the guard of CMD (see guardMain).
const guardCommand = "__leasectl-guard"

// maybeGuard runs the guard and exits when this process was started as one;
// it returns at once otherwise. main (and the tests' TestMain) call it
// first.
func maybeGuard() {
	if len(os.Args) > 1 && os.Args[1] == guardCommand {
		os.Exit(guardMain(os.Args[2:]))
	}
}

// Why the guard stopped CMD's tree, as it reports it to leasectl.
const (
	whySelf     = "self"     // CMD ended by itself (the rest of its tree was then stopped)
	whyStopped  = "stopped"  // leasectl asked (leadership ended, SIGINT, SIGTERM), or the guard got SIGTERM
	whyDeadline = "deadline" // the safe deadline came without an extension
	whyOrphaned = "orphaned" // leasectl died (its control pipe closed)
)

// guard is the process that starts CMD and holds its term's safe deadline:
// leasectl run starts it (leasectl itself, with guardCommand first) when it
// begins to lead and tells it, through a pipe, the safe deadline after
// every successful renewal. The guard is a child subreaper, so every
// process CMD starts stays its descendant even when its parent dies; it
// stops all of them, SIGTERM to CMD's process group and every descendant,
// then SIGKILL until none is left, when
//
//   - the safe deadline minus 2×grace passes without an extension
//     (SIGKILL at the deadline minus grace), as leasectl itself would;
//   - leasectl dies or closes the pipe early (SIGKILL after the grace,
//     and never after the deadline minus grace);
//   - leasectl asks it to (stop), or the guard gets SIGTERM;
//   - CMD ends by itself: what it left running is stopped too.
//
// Then it reports CMD's status to leasectl, waits for the pipe to close,
// removes the checkpoint directory of the term and exits. It lives in a
// process group of its own, so that a signal for leasectl's group (^C, ^Z)
// does not reach it; it ignores SIGINT, SIGHUP, SIGQUIT and the terminal's
// stop signals. Only SIGKILL or SIGSTOP of the guard itself ends its watch
// (CMD, its direct child, dies with it by a parent-death signal).
type guard struct {
	grace    time.Duration
	deadline int64  // CLOCK_MONOTONIC nanoseconds: the term's safe deadline
	cmd      int    // CMD's pid, also its process group
	reaped   bool   // CMD has been waited for: its pid (and group id) may be reused
	status   int    // CMD's exit status, 128+signal when a signal ended it
	gone     bool   // no child is left: the whole tree is gone
	why      string // why the tree was stopped (whySelf …)
	self     int
	logf     func(string, ...any)
}

// guardMain is the guard process (see guard): fd 3 is the control pipe
// from leasectl, fd 4 the status pipe to it. Its exit status is 0, or 2
// when it was started wrongly.
func guardMain(args []string) int {
	// CMD's parent-death signal follows the thread that started it.
	runtime.LockOSThread()
	logf := func(format string, a ...any) {
		_, _ = fmt.Fprintf(os.Stderr, "leasectl run: guard: "+format+"\n", a...)
	}
	fs := flag.NewFlagSet(guardCommand, flag.ContinueOnError)
	grace := fs.Duration("grace", time.Second, "")
	deadline := fs.Int64("deadline", 0, "")
	dir := fs.String("dir", "", "")
	path := fs.String("path", "", "")
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 || *path == "" || *grace <= 0 {
		logf("started wrongly (%q): it is started by leasectl run", args)
		return 2
	}
	var st1, st2 syscall.Stat_t
	if syscall.Fstat(3, &st1) != nil || syscall.Fstat(4, &st2) != nil {
		logf("started without its pipes: it is started by leasectl run")
		return 2
	}
	syscall.CloseOnExec(3) // CMD must not hold leasectl's pipes
	syscall.CloseOnExec(4)
	// What leasectl wrote before the guard got here (a guard slow to start
	// may find renewals waiting), to be read before its deadline is acted on.
	pending := readPending(3)
	ctl, status := os.NewFile(3, "control"), os.NewFile(4, "status")
	if *dir != "" {
		defer func() { _ = os.RemoveAll(*dir) }()
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		logf("cannot become a child subreaper (%v): processes whose parent ends escape the guard", err)
	}
	// Caught rather than ignored, so that CMD starts with them at their
	// defaults.
	quiet := make(chan os.Signal, 8)
	signal.Notify(quiet, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)

	g := &guard{grace: *grace, deadline: *deadline, self: os.Getpid(), logf: logf}
	lines := make(chan string, 64+len(pending))
	for _, l := range pending {
		lines <- l
	}
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	p, err := os.StartProcess(*path, fs.Args(), &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		_, _ = fmt.Fprintf(status, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		for range lines { // until leasectl is done with the term
		}
		return 0
	}
	g.cmd = p.Pid
	_, _ = fmt.Fprintf(status, "started %d\n", p.Pid)
	g.watch(lines, term, quiet, sigchld)
	_, _ = fmt.Fprintf(status, "exit %d %s\n", g.status, g.why)
	_ = status.Close()
	for range lines { // leasectl reads CMD's last checkpoint before it closes the pipe
	}
	return 0
}

// watch runs CMD's term until its whole tree is gone.
func (g *guard) watch(lines <-chan string, term, quiet, sigchld <-chan os.Signal) {
	const (
		running = iota
		terminating
		killing
	)
	phase := running
	timer := time.NewTimer(g.stopIn(g.deadline, 2*g.grace))
	defer timer.Stop()
	var tick <-chan time.Time
	// stop begins the end: SIGTERM now, SIGKILL after the grace, and no
	// later than the deadline minus the grace.
	stop := func(why string) {
		if phase != running {
			return
		}
		phase, g.why = terminating, why
		g.signalTree(syscall.SIGTERM)
		timer.Reset(min(g.grace, g.stopIn(g.deadline, g.grace)))
	}
	// handle acts on one message of leasectl's (ok false: the pipe closed).
	handle := func(line string, ok bool) {
		switch {
		case !ok:
			lines = nil
			stop(whyOrphaned)
		case strings.HasPrefix(line, "deadline "):
			d, err := strconv.ParseInt(strings.TrimPrefix(line, "deadline "), 10, 64)
			if err == nil && phase == running && d > g.deadline {
				g.deadline = d
				timer.Reset(g.stopIn(d, 2*g.grace))
			}
		case line == "stop":
			stop(whyStopped)
		}
	}
	// extended reports whether messages already read extend the deadline
	// past now: the timer and a message can be ready at once.
	extended := func() bool {
		for lines != nil {
			select {
			case line, ok := <-lines:
				handle(line, ok)
				continue
			default:
			}
			break
		}
		return phase == running && g.stopIn(g.deadline, 2*g.grace) > 0
	}
	for !g.gone {
		select {
		case line, ok := <-lines:
			handle(line, ok)
		case <-term:
			stop(whyStopped)
		case <-quiet:
		case <-timer.C:
			was := phase
			switch {
			case was == running && (extended() || phase != running):
				// A message came first: an extension, or a stop (or the
				// pipe closed); either reset the timer.
			case was == running:
				g.logf("the safe deadline is near and leasectl renewed nothing: SIGTERM to CMD's tree, SIGKILL in %v", g.grace)
				stop(whyDeadline)
			case was == terminating:
				g.logf("CMD's tree still running after SIGTERM: SIGKILL")
				phase = killing
				g.signalTree(syscall.SIGKILL)
				t := time.NewTicker(20 * time.Millisecond)
				defer t.Stop()
				tick = t.C
			}
		case <-tick: // a process forked meanwhile
			g.signalTree(syscall.SIGKILL)
		case <-sigchld:
			g.reap()
			if g.reaped && phase == running {
				stop(whySelf) // what CMD left running ends with it
			}
		}
	}
}

// readPending returns the whole lines that can be read from fd without
// waiting.
func readPending(fd int) []string {
	if err := syscall.SetNonblock(fd, true); err != nil {
		return nil
	}
	defer func() { _ = syscall.SetNonblock(fd, false) }()
	var data []byte
	buf := make([]byte, 4096)
	for {
		n, err := syscall.Read(fd, buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if n <= 0 || err != nil {
			break
		}
		data = append(data, buf[:n]...)
	}
	// Each line is one write, shorter than PIPE_BUF: none comes in parts.
	text := string(data)
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		text = text[:i]
	} else {
		text = ""
	}
	if text == "" {
		return nil
	}
	return strings.Split(text, "\n")
}

// until is how long until the CLOCK_MONOTONIC instant at, 0 if past.
func (g *guard) until(at int64) time.Duration { return max(0, time.Duration(at-monoNow())) }

// stopIn is how long until the stop time of the safe deadline (a
// CLOCK_MONOTONIC instant) for before, 0 if past: the deadline less before
// (client.StopAt, the rule every SDK stops work by). SIGTERM comes at
// before = 2×grace, SIGKILL at the latest at before = grace.
func (g *guard) stopIn(deadline int64, before time.Duration) time.Duration {
	return g.until(client.StopAt(time.Unix(0, deadline), before).UnixNano())
}

// reap waits for every child that has ended, CMD's status among them, and
// notes when none is left.
func (g *guard) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.ECHILD):
			g.gone = true
			return
		case err != nil || pid == 0:
			return
		}
		if pid == g.cmd {
			g.reaped = true
			g.status = ws.ExitStatus()
			if ws.Signaled() {
				g.status = 128 + int(ws.Signal())
			}
		}
	}
}

// signalTree sends sig to CMD's process group, while CMD has not been
// waited for (afterwards its id may be reused), and to every descendant of
// the guard. Only this goroutine reaps, so a child's pid is not reused
// between finding and signalling it; a grandchild's can be, if its parent
// reaps it meanwhile (a cgroup would close that gap).
func (g *guard) signalTree(sig syscall.Signal) {
	if !g.reaped {
		_ = syscall.Kill(-g.cmd, sig)
	}
	for _, p := range descendants(g.self) {
		if g.reaped || p.pgid != g.cmd {
			_ = syscall.Kill(p.pid, sig)
		}
	}
}

// proc is a process as /proc/PID/stat tells it.
type proc struct{ pid, ppid, pgid int }

// descendants returns the processes below pid, read from /proc.
func descendants(pid int) []proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]proc{}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(n); ok {
			children[p.ppid] = append(children[p.ppid], p)
		}
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// readProc reads the parent and process group of pid.
func readProc(pid int) (proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(s[i+1:]) // state ppid pgrp …
	if len(f) < 3 {
		return proc{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return proc{}, false
	}
	return proc{pid: pid, ppid: ppid, pgid: pgid}, true
}

// monoNow is CLOCK_MONOTONIC now, in nanoseconds: the same clock in every
// process of the system, and the one Go's timers and time.Since use.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", err)) // cannot fail on Linux
	}
	return ts.Nano()
}
