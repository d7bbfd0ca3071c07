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

// TestRunHoldsThroughASession: run holds the lease through a session by
// default (the service shows it session-held while CMD runs) and says so
// on stderr; --plain-renewals holds it with plain renewals and says that.
func TestRunHoldsThroughASession(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn", "LEASESVC_MIN_TTL": "200ms"})
	for _, tc := range []struct {
		flags   []string
		session bool
		says    string
	}{
		{nil, true, "holding %s through a session (window 1s)"},
		{[]string{"--plain-renewals"}, false, "holding %s with plain renewals"},
	} {
		name := e2e.UniqueName("runsess")
		ctx, cancel := context.WithCancel(t.Context())
		var out syncBuffer
		done := make(chan error, 1)
		args := append([]string{"run", name, "--ttl", "2s", "--url", svc.URL}, tc.flags...)
		args = append(args, "--", "sh", "-c", "echo started; exec sleep 60")
		go func() { done <- run(ctx, args, func(string) string { return "" }, &out, &out) }()
		waitOutput(t, &out, "started")
		r := e2e.Client{URL: svc.URL}.Get(t, "/v1/leases/"+name)
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("leasectl run did not stop within 10s")
		}
		if got := r.Body["session"] == true; got != tc.session || r.Body["held"] != true {
			t.Fatalf("run %v: while CMD ran the lease was %s, want held, session-held %v", tc.flags, r.Raw, tc.session)
		}
		if want := strings.Replace(tc.says, "%s", name, 1); !strings.Contains(out.String(), want) {
			t.Fatalf("run %v: stderr lacks %q:\n%s", tc.flags, want, out.String())
		}
	}
}

// TestRunAtTheSessionLimitRenewsPlainly checks that run leads with plain
// renewals when the service refuses its session at the session limit (429
// to open, docs/contract.md §14), rather than waiting for a slot for ever.
func TestRunAtTheSessionLimitRenewsPlainly(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn", "LEASESVC_MAX_SESSIONS": "1"})
	c, err := client.New(svc.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	full, err := c.OpenSession(t.Context(), client.SessionConfig{}) // takes the instance's one slot
	if err != nil {
		t.Fatalf("open the session that fills the limit: %v", err)
	}
	defer func() { _ = full.Close(context.WithoutCancel(t.Context())) }()
	if _, err := c.OpenSession(t.Context(), client.SessionConfig{}); !errors.Is(err, client.ErrSessionLimit) {
		t.Fatalf("a second session: %v, want ErrSessionLimit", err)
	}

	name := e2e.UniqueName("runlimit")
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	done := make(chan error, 1)
	args := []string{"run", name, "--ttl", "2s", "--url", svc.URL, "--", "sh", "-c", "echo started; exec sleep 60"}
	go func() { done <- run(ctx, args, func(string) string { return "" }, &out, &out) }()
	waitOutput(t, &out, "started")
	r := e2e.Client{URL: svc.URL}.Get(t, "/v1/leases/"+name)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("leasectl run did not stop within 10s")
	}
	if r.Body["held"] != true || r.Body["session"] == true {
		t.Fatalf("while CMD ran the lease was %s, want held with plain renewals", r.Raw)
	}
	for _, want := range []string{"session limit is reached", "holding " + name + " with plain renewals"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("stderr lacks %q:\n%s", want, out.String())
		}
	}
}
