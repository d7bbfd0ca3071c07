package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/leasesvc/leasesvc/fence"
)

// jwksTimeout bounds `leasectl fence jwks`'s request.
const jwksTimeout = 30 * time.Second

// cmdFence runs `leasectl fence jwks`: it prints the service's proof keys
// (GET /.well-known/jwks.json, public), which a sink without network keeps
// as a file for fence.ParseJWKS (docs/fencing.md).
func cmdFence(ctx context.Context, e *env, args []string) error {
	fs := e.flags("fence")
	pos, err := parse(fs, args, "jwks")
	if err != nil {
		return err
	}
	if pos[0] != "jwks" {
		return flagError(fs, "unknown fence command %q: want jwks", pos[0])
	}
	ctx, cancel := context.WithTimeout(ctx, jwksTimeout)
	defer cancel()
	url := strings.TrimRight(e.url, "/") + "/.well-known/jwks.json"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usageError("--url: %v", err)
	}
	hc := e.hc
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return &exitError{code: exitUnavailable, err: fmt.Errorf("fetch %s: %w", url, err)}
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &exitError{code: exitUnavailable, err: fmt.Errorf("fetch %s: %w", url, err)}
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch %s: %s", url, resp.Status)
	}
	if _, err := fence.ParseJWKS(body); err != nil { // print only a key set a sink can load
		return fmt.Errorf("%s: %w", url, err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, body, "", "  "); err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	out.WriteByte('\n')
	if _, err := e.stdout.Write(out.Bytes()); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}
