package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// startRun runs `leasectl run` with args against url until the test ends
// or cancel is called; done gets its error.
func startRun(t *testing.T, url string, args ...string) (out *syncBuffer, cancel context.CancelFunc, done chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out = &syncBuffer{}
	done = make(chan error, 1)
	args = append([]string{"run", "--url", url}, args...)
	go func() { done <- run(ctx, args, func(string) string { return "" }, out, out) }()
	t.Cleanup(cancel)
	return out, cancel, done
}

// wait returns run's error, or fails the test after 10s.
func wait(t *testing.T, done chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("leasectl run did not stop within 10s")
		return nil
	}
}

// TestRunWindowAndTTLUnderASession (issue 38 items 2 and 3): --window
// sets the session's window (the lease shows it), and --ttl, which a
// session does not use, is said to be ignored rather than silently
// dropped.
func TestRunWindowAndTTLUnderASession(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn", "LEASESVC_MIN_TTL": "200ms"})
	name := e2e.UniqueName("runwin")
	out, cancel, done := startRun(t, svc.URL, name, "--window", "3s", "--ttl", "5s", "--", "sh", "-c", "echo started; exec sleep 60")
	waitOutput(t, out, "started")
	r := e2e.Client{URL: svc.URL}.Get(t, "/v1/leases/"+name)
	cancel()
	_ = wait(t, done)
	if r.Body["session"] != true || r.Body["sessionWindowMs"] != 3000.0 {
		t.Fatalf("with --window 3s the lease was %s, want session-held with sessionWindowMs 3000", r.Raw)
	}
	for _, want := range []string{"through a session (window 3s)", "--ttl 5s does not apply"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRunCampaignsAgainAfterALostTerm (issue 38 item 3): a term that is
// lost (here revoked) stops CMD, and run campaigns again, starting CMD
// anew under the next fencing token, as the Electors do; with
// --exit-on-loss it exits 4 instead.
func TestRunCampaignsAgainAfterALostTerm(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn", "LEASESVC_MIN_TTL": "200ms"})
	c, err := client.New(svc.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := []string{"--", "sh", "-c", `echo "started $LEASE_FENCING_TOKEN"; exec sleep 60`}

	name := e2e.UniqueName("runagain")
	out, cancel, done := startRun(t, svc.URL, append([]string{name}, cmd...)...)
	waitOutput(t, out, "started 1")
	if _, err := c.Revoke(t.Context(), name, client.RevokeRequest{Reason: "test", FencingToken: 1}); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, out, "campaigning again")
	waitOutput(t, out, "started 2")
	cancel()
	_ = wait(t, done)

	name = e2e.UniqueName("runexit")
	out, _, done = startRun(t, svc.URL, append([]string{name, "--exit-on-loss"}, cmd...)...)
	waitOutput(t, out, "started 1")
	if _, err := c.Revoke(t.Context(), name, client.RevokeRequest{Reason: "test", FencingToken: 1}); err != nil {
		t.Fatal(err)
	}
	var ex *exitError
	if err := wait(t, done); !errors.As(err, &ex) || ex.code != exitLost {
		t.Fatalf("run --exit-on-loss after a revoke = %v, want exit %d\n%s", err, exitLost, out.String())
	}
	if strings.Contains(out.String(), "campaigning again") {
		t.Fatalf("run --exit-on-loss campaigned again:\n%s", out.String())
	}
}
