package main

import (
	"context"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// TestWatchPrefixThroughARestart: leasectl watch --prefix against the real
// leasesvc binary prints a state per lease under the prefix, then each
// change; when the service restarts (a redeploy: SIGTERM ends the stream,
// the port is closed for a while) the watch reconnects by itself and goes
// on printing, and it never prints a lease outside the prefix.
func TestWatchPrefixThroughARestart(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn"})
	c := e2e.Client{URL: svc.URL}
	c.Post(t, "/v1/leases/fleet.one:acquire", `{"holder":"a","ttlMs":60000}`)
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"watch", "--prefix", "fleet.", "--url", svc.URL}, func(string) string { return "" }, &out, &out)
	}()
	waitOutput(t, &out, "fleet.one")
	c.Post(t, "/v1/leases/other.x:acquire", `{"holder":"x","ttlMs":60000}`)
	c.Post(t, "/v1/leases/fleet.one:release", `{"holder":"a","fencingToken":1}`)
	waitOutput(t, &out, "released")

	svc.Restart() // the memory backend starts empty again
	c.Post(t, "/v1/leases/fleet.two:acquire", `{"holder":"after-restart","ttlMs":60000}`)
	waitOutput(t, &out, "after-restart")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("watch ended with %v\n%s", err, out.String())
	}
	text := out.String()
	if strings.Contains(text, "other.x") {
		t.Fatalf("watch --prefix fleet. printed a lease outside it:\n%s", text)
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if !strings.HasPrefix(lines[0], "EVENT TIME") || !strings.Contains(lines[0], "LEASE") {
		t.Fatalf("header %q", lines[0])
	}
	t.Logf("leasectl watch --prefix output:\n%s", text)
}
