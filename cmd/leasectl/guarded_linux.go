//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// deadlineFeed passes each safe deadline of the term (the Elector's
// OnSafeDeadline) on to the guard, once one runs.
type deadlineFeed struct {
	mu sync.Mutex
	at time.Time // the latest safe deadline
	w  *os.File  // the guard's control pipe, while a guard runs
}

// set records the safe deadline at and tells the guard.
func (f *deadlineFeed) set(at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = at
	f.sendLocked("deadline " + strconv.FormatInt(f.monoLocked(), 10))
}

// mono is the latest safe deadline on CLOCK_MONOTONIC, in nanoseconds.
func (f *deadlineFeed) mono() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.monoLocked()
}

func (f *deadlineFeed) monoLocked() int64 {
	m := monoNow() // first: the deadline errs early, not late
	return m + int64(time.Until(f.at))
}

// attach sends the deadlines to w from now on, the latest at once.
func (f *deadlineFeed) attach(w *os.File) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.w = w
	f.sendLocked("deadline " + strconv.FormatInt(f.monoLocked(), 10))
}

// detach stops sending.
func (f *deadlineFeed) detach() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.w = nil
}

// send writes one line to the guard, if one is attached.
func (f *deadlineFeed) send(line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sendLocked(line)
}

func (f *deadlineFeed) sendLocked(line string) {
	if f.w == nil {
		return
	}
	// A guard that reads nothing (stopped) must not stall the Elector,
	// which calls set from its loop.
	_ = f.w.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = f.w.WriteString(line + "\n")
}

// supervise runs CMD under a guard process (see guard) until CMD's whole
// process tree is gone: the guard stops it when lctx is done (leasectl
// asks it to), when the safe deadline passes without a renewal (even when
// leasectl is frozen), and when leasectl dies. dir is the term's checkpoint
// directory, which the guard removes if leasectl cannot. finish, called
// once CMD's last checkpoint has been read, lets the guard go.
func supervise(lctx context.Context, argv, env []string, grace time.Duration, dir string, feed *deadlineFeed, e *env, logf func(string, ...any)) (o outcome, finish func()) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return outcome{err: err, status: 127}, func() {}
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return outcome{setup: fmt.Errorf("guard: %w", err)}, func() {}
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		_, _ = ctlR.Close(), ctlW.Close()
		return outcome{setup: fmt.Errorf("guard: %w", err)}, func() {}
	}
	g := exec.Command("/proc/self/exe") // leasectl itself, even if its file was replaced meanwhile
	g.Args = append([]string{"leasectl", guardCommand, "--grace", grace.String(), "--deadline", strconv.FormatInt(feed.mono(), 10),
		"--dir", dir, "--path", path, "--"}, argv...)
	g.Env = env
	g.Stdout, g.Stderr = e.stdout, e.stderr
	g.ExtraFiles = []*os.File{ctlR, stW}
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // out of reach of ^C and ^Z: leasectl decides
	g.WaitDelay = time.Second
	err = g.Start()
	_, _ = ctlR.Close(), stW.Close()
	if err != nil {
		_, _ = ctlW.Close(), stR.Close()
		return outcome{setup: fmt.Errorf("start the guard: %w", err)}, func() {}
	}
	feed.attach(ctlW)
	msgs := make(chan string)
	go func() {
		defer close(msgs)
		sc := bufio.NewScanner(stR)
		for sc.Scan() {
			msgs <- sc.Text()
		}
	}()
	finish = func() {
		feed.detach()
		_ = ctlW.Close()
		for range msgs {
		}
		_ = g.Wait()
		_ = stR.Close()
	}
	pid, stopping, done := 0, false, lctx.Done()
	var kill <-chan time.Time
	for {
		select {
		case <-done:
			done, stopping = nil, true
			logf("leadership ending (%v): SIGTERM to CMD, SIGKILL in %v", context.Cause(lctx), grace)
			feed.send("stop")
			// And CMD's process group from here, in case the guard cannot
			// act (stopped): CMD's pid stays its until the guard reports.
			if pid > 0 {
				_ = syscall.Kill(-pid, syscall.SIGTERM)
			}
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			if pid > 0 {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		case m, ok := <-msgs:
			if !ok {
				// Killed: CMD died with it (a parent-death signal); its
				// group may not have.
				if pid > 0 {
					_ = syscall.Kill(-pid, syscall.SIGKILL)
				}
				return outcome{guard: errors.New("the guard of CMD ended without reporting CMD's status; CMD's process group was killed")}, finish
			}
			kind, rest, _ := strings.Cut(m, " ")
			switch kind {
			case "started":
				pid, _ = strconv.Atoi(rest)
			case "error":
				return outcome{err: errors.New(rest), status: 127}, finish
			case "exit":
				st, why, _ := strings.Cut(rest, " ")
				o.status, _ = strconv.Atoi(st)
				o.stopped = stopping || why != whySelf
				switch {
				case why == whySelf && !stopping:
					logf("CMD exited with status %d; releasing", o.status)
				case why == whyDeadline && lctx.Err() == nil:
					o.cause = fmt.Errorf("%w: the guard stopped CMD (leasectl renewed nothing in time)", client.ErrSafeDeadline)
				}
				return o, finish
			}
		}
	}
}
