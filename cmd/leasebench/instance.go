package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/leasesvc/leasesvc/internal/svcproc"
)

// instance is a leasesvc process a session scenario started (from
// -leasesvc, with leasebench's environment, so on the same backend).
type instance struct {
	url string
	p   *svcproc.Proc
	log *os.File
}

// startInstance starts the leasesvc binary with leasebench's environment
// plus env, on a free port, and waits until /readyz answers.
func startInstance(ctx context.Context, b *bench, id string, env ...string) (*instance, error) {
	logf, err := os.CreateTemp("", "leasebench-"+id+"-*.log")
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", id, err)
	}
	p, err := svcproc.Start(ctx, svcproc.Options{Bin: b.cfg.leasesvc, Stdout: logf, Stderr: logf, Probe: "/readyz", Client: b.svc.hc,
		Env: append([]string{"LEASESVC_INSTANCE_ID=" + id, "LEASESVC_LOG_LEVEL=warn"}, env...)})
	if err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("instance %s: %w; log in %s", id, err, logf.Name())
	}
	return &instance{url: p.URL, p: p, log: logf}, nil
}

// stop sends sig and waits for the process to end (SIGKILL after 15 s).
func (in *instance) stop(sig syscall.Signal) {
	in.p.Stop(sig, 15*time.Second)
	_ = in.log.Close()
}

// pid returns the process id.
func (in *instance) pid() int { return in.p.Pid() }
