//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing here: only Linux has a parent-death signal.
// Elsewhere CMD outlives a leasectl that is killed with SIGKILL (a leasectl
// stopped by SIGINT or SIGTERM still stops CMD), so run CMD under a
// supervisor that ends it with leasectl (docs/agents.md).
func dieWithParent(*exec.Cmd) {}

func lockThread() func() { return func() {} }
