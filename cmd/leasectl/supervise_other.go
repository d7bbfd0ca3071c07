//go:build !linux

package main

import (
	"context"
	"os/exec"
	"time"
)

// maybeGuard returns at once: the guard process is Linux's (guard_linux.go).
func maybeGuard() {}

// deadlineFeed is the safe deadline's way to a guard; there is none here.
type deadlineFeed struct{}

func (*deadlineFeed) set(time.Time) {}

// supervise runs CMD, a direct child of leasectl, until it exits or lctx is
// done; then it sends SIGTERM to CMD's process group and SIGKILL grace
// later. Without the guard of Linux, a leasectl killed with SIGKILL or
// frozen leaves CMD running (docs/agents.md).
func supervise(lctx context.Context, argv, env []string, grace time.Duration, _ string, _ *deadlineFeed, e *env, logf func(string, ...any)) (outcome, func()) {
	return superviseDirect(lctx, argv, env, grace, e, logf), func() {}
}

// superviseDirect is supervise without a guard.
func superviseDirect(lctx context.Context, argv, env []string, grace time.Duration, e *env, logf func(string, ...any)) outcome {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = e.stdout, e.stderr
	ownGroup(cmd)
	defer lockThread()() // until CMD is reaped: its parent-death signal follows this thread
	if err := cmd.Start(); err != nil {
		return outcome{err: err, status: 127}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		st := statusOf(cmd, err)
		logf("CMD exited with status %d; releasing", st)
		return outcome{status: st}
	case <-lctx.Done():
	}
	logf("leadership ending (%v): SIGTERM to CMD, SIGKILL in %v", context.Cause(lctx), grace)
	terminate(cmd)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		return outcome{status: statusOf(cmd, err), stopped: true}
	case <-t.C:
	}
	logf("CMD still running after %v: SIGKILL", grace)
	kill(cmd)
	err := <-done
	return outcome{status: statusOf(cmd, err), stopped: true}
}
