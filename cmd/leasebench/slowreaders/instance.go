package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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

// tokenOf is the static bearer token of principal i; principal i is
// "p<i>@bench" (i = principals is the legitimate reader's).
func tokenOf(i int) string { return fmt.Sprintf("slowreaders-token-%02d-0123456789", i) }

// writeAuthFiles writes a tokens file for principals+1 principals and a
// policy granting each acquire (and read) on every name, into dir.
func writeAuthFiles(dir string, principals int) (tokens, policy string, err error) {
	var b strings.Builder
	b.WriteString("tokens:\n")
	for i := range principals + 1 {
		fmt.Fprintf(&b, "  - principal: p%d@bench\n    token: %q\n", i, tokenOf(i))
	}
	tokens, policy = filepath.Join(dir, "tokens.yaml"), filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(tokens, []byte(b.String()), 0o600); err != nil {
		return "", "", fmt.Errorf("tokens file: %w", err)
	}
	grants := "grants:\n  - principals: [\"*\"]\n    verbs: [acquire]\n    prefixes: [\"*\"]\n"
	if err := os.WriteFile(policy, []byte(grants), 0o600); err != nil {
		return "", "", fmt.Errorf("policy file: %w", err)
	}
	return tokens, policy, nil
}

// start runs bin on a free port with the memory backend, static tokens
// (tokens, policy) and no rate limit, with env added, and waits until it
// answers /healthz.
func start(ctx context.Context, bin, tokens, policy string, env []string, stderr io.Writer) (*instance, error) {
	p, err := svcproc.Start(ctx, svcproc.Options{Bin: bin, Stderr: stderr, Probe: "/healthz",
		Env: append([]string{"LEASESVC_BACKEND=memory", "LEASESVC_AUTH=static", "LEASESVC_AUTH_TOKENS=" + tokens,
			"LEASESVC_POLICY=" + policy, "LEASESVC_LISTEN=127.0.0.1", "LEASESVC_LOG_LEVEL=error", "LEASESVC_RATE_LIMIT=0"}, env...)})
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
