//go:build !unix

package main

import (
	"os"
	"os/exec"
)

func ownGroup(cmd *exec.Cmd) { dieWithParent(cmd) }

func terminate(cmd *exec.Cmd) { _ = cmd.Process.Signal(os.Interrupt) }

func kill(cmd *exec.Cmd) { _ = cmd.Process.Kill() }

func statusOf(cmd *exec.Cmd, _ error) int { return cmd.ProcessState.ExitCode() }
