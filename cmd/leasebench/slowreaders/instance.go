package main

import (
	"context"
	"io"
	"syscall"
	"time"

	"github.com/leasesvc/leasesvc/internal/svcproc"
)

// instance is a leasesvc process started by this command.
type instance struct {
	p    *svcproc.Proc
	base string // http://127.0.0.1:PORT
	addr string // 127.0.0.1:PORT
}

// start runs bin on a free port with the memory backend and no
// authentication, and waits until it answers /healthz.
func start(ctx context.Context, bin string, stderr io.Writer) (*instance, error) {
	p, err := svcproc.Start(ctx, svcproc.Options{Bin: bin, Stderr: stderr, Probe: "/healthz",
		Env: []string{"LEASESVC_BACKEND=memory", "LEASESVC_AUTH=none", "LEASESVC_LISTEN=127.0.0.1",
			"LEASESVC_LOG_LEVEL=error", "LEASESVC_RATE_LIMIT=0"}})
	if err != nil {
		return nil, err
	}
	return &instance{p: p, base: p.URL, addr: p.Addr}, nil
}

// rss is the process's resident memory in MiB.
func (in *instance) rss() (float64, error) {
	b, err := svcproc.RSS(in.p.Pid())
	return float64(b) / (1 << 20), err
}

// stop ends the process: SIGTERM, then SIGKILL after 10 s.
func (in *instance) stop() { in.p.Stop(syscall.SIGTERM, 10*time.Second) }
