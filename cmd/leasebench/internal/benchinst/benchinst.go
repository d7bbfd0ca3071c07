// Package benchinst starts the leasesvc instances that the measuring
// tools of cmd/leasebench (slowreaders, sessionsockets) run their mixes
// against: a binary on a free loopback port with the memory backend and
// static tokens, waited for until it answers /healthz; it writes the
// tokens and policy files and samples the process's resident memory.
package benchinst

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/leasesvc/leasesvc/internal/svcproc"
)

// Auth is a tool's set of static tokens: principal i is "p<i>@bench",
// with the token Token(i).
type Auth struct {
	// Tool names the tokens ("slowreaders-token-00-…").
	Tool string
	// Tokens and Policy are the files Write wrote.
	Tokens, Policy string
}

// Token is the static bearer token of principal i.
func (a *Auth) Token(i int) string { return fmt.Sprintf("%s-token-%02d-0123456789", a.Tool, i) }

// Header is the Authorization header of principal i.
func (a *Auth) Header(i int) http.Header {
	return http.Header{"Authorization": {"Bearer " + a.Token(i)}}
}

// Write writes, into dir, a tokens file of principals 0 to n-1 and a
// policy granting each acquire (and so read) on every name, and notes
// their paths in a.
func (a *Auth) Write(dir string, n int) error {
	var b strings.Builder
	b.WriteString("tokens:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - principal: p%d@bench\n    token: %q\n", i, a.Token(i))
	}
	a.Tokens, a.Policy = filepath.Join(dir, "tokens.yaml"), filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(a.Tokens, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	grants := "grants:\n  - principals: [\"*\"]\n    verbs: [acquire]\n    prefixes: [\"*\"]\n"
	if err := os.WriteFile(a.Policy, []byte(grants), 0o600); err != nil {
		return fmt.Errorf("policy file: %w", err)
	}
	return nil
}

// Instance is a leasesvc process started by Start.
type Instance struct {
	// Base is its base URL, http://127.0.0.1:PORT.
	Base string
	// Addr is its address, 127.0.0.1:PORT.
	Addr string

	p *svcproc.Proc
}

// Start runs bin on a free loopback port with the memory backend, the
// static tokens and policy of a, and log level error, with env added
// after these, and waits until it answers /healthz.
func Start(ctx context.Context, bin string, a *Auth, env []string, stderr io.Writer) (*Instance, error) {
	p, err := svcproc.Start(ctx, svcproc.Options{Bin: bin, Stderr: stderr, Probe: "/healthz",
		Env: append([]string{"LEASESVC_BACKEND=memory", "LEASESVC_AUTH=static", "LEASESVC_AUTH_TOKENS=" + a.Tokens,
			"LEASESVC_POLICY=" + a.Policy, "LEASESVC_LISTEN=127.0.0.1", "LEASESVC_LOG_LEVEL=error"}, env...)})
	if err != nil {
		return nil, err
	}
	return &Instance{p: p, Base: p.URL, Addr: p.Addr}, nil
}

// RSS is the process's resident memory in MiB.
func (in *Instance) RSS() (float64, error) {
	b, err := svcproc.RSS(in.p.Pid())
	return float64(b) / (1 << 20), err
}

// Sample notes the resident memory every 100 ms until stop is closed;
// the function it returns waits for that and gives the peak and the last
// value.
func (in *Instance) Sample(stop <-chan struct{}) func() (peak, last float64) {
	done := make(chan struct{})
	var peak, last float64
	go func() {
		defer close(done)
		for {
			if m, err := in.RSS(); err == nil {
				peak, last = max(peak, m), m
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() (float64, float64) { <-done; return peak, last }
}

// Stop ends the process: SIGTERM, then SIGKILL after 10 s.
func (in *Instance) Stop() { in.p.Stop(syscall.SIGTERM, 10*time.Second) }
