package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/leasesvc/leasesvc/internal/rawsession"
)

// agentEnv, when set in leasebench's environment, makes the process an
// agent instead (agentMain): the crash-takeover scenarios start agents as
// child processes of their own so that they can SIGKILL them.
const agentEnv = "LEASEBENCH_AGENT"

// agentSpec is what an agent process is told to do (JSON in agentEnv).
type agentSpec struct {
	URL    string `json:"url"`
	Name   string `json:"name"`
	Holder string `json:"holder"`
	// WindowMs > 0: hold through a session with that window; else hold
	// with plain renewals: TTLMs, renewing every third of it.
	WindowMs int64 `json:"windowMs,omitempty"`
	TTLMs    int64 `json:"ttlMs,omitempty"`
}

// agentHeld is the line an agent prints once it holds.
type agentHeld struct {
	Token int64  `json:"token"`
	Error string `json:"error,omitempty"`
}

// agentMain runs an agent: it acquires the lease, prints agentHeld on
// stdout and keeps the holding (heartbeats, or renewals) until killed.
func agentMain(spec string) int {
	var s agentSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "leasebench agent:", err)
		return 2
	}
	ctx := context.Background()
	say := func(h agentHeld) { _ = json.NewEncoder(os.Stdout).Encode(h) }
	if s.WindowMs > 0 {
		a := &rawsession.Agent{URLs: []string{s.URL}, Window: time.Duration(s.WindowMs) * time.Millisecond}
		if _, err := a.Open(ctx); err != nil {
			say(agentHeld{Error: err.Error()})
			return 1
		}
		l, err := a.Acquire(ctx, s.Name, s.Holder, 0)
		if err != nil {
			say(agentHeld{Error: err.Error()})
			return 1
		}
		say(agentHeld{Token: l.FencingToken})
		select {} // heartbeats go on until the process is killed
	}
	svc := newService(10 * time.Second)
	ttl := time.Duration(s.TTLMs) * time.Millisecond
	a, err := must(svc.acquire(ctx, s.URL, s.Name, s.Holder, ttl, 0))
	if err != nil {
		say(agentHeld{Error: err.Error()})
		return 1
	}
	say(agentHeld{Token: a.lease.FencingToken})
	for {
		time.Sleep(ttl / 3)
		if _, err := must(svc.renew(ctx, s.URL, s.Name, s.Holder, a.lease.FencingToken)); err != nil {
			fmt.Fprintln(os.Stderr, "leasebench agent:", err)
		}
	}
}

// agentProc is a running agent process.
type agentProc struct {
	cmd   *exec.Cmd
	token int64
	done  chan struct{}
}

// startAgent starts an agent process (this executable again) and waits
// until it holds.
func startAgent(ctx context.Context, s agentSpec) (*agentProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	spec, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), agentEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("agent: start: %w", err)
	}
	p := &agentProc{cmd: cmd, done: make(chan struct{})}
	lines := make(chan agentHeld, 1)
	go func() {
		var h agentHeld
		sc := bufio.NewScanner(out)
		if !sc.Scan() {
			h.Error = "exited before holding"
		} else if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
			h.Error = err.Error()
		}
		lines <- h
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case h := <-lines:
		if h.Error != "" {
			p.kill()
			return nil, fmt.Errorf("agent: %s", h.Error)
		}
		p.token = h.Token
		return p, nil
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		p.kill()
		return nil, errors.New("agent: did not hold within 30s")
	}
}

// kill SIGKILLs the agent and waits for it to end.
func (p *agentProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}
