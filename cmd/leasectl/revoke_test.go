package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/client"
)

const revokedLease = `{"name":"jobs.a","holder":"agent-a","fencingToken":3,"ttlMs":30000,"held":false,"remainingMs":0,` +
	`"expireTime":"2026-11-21T18:00:12Z","serverTime":"2026-11-21T18:00:12Z","metadata":{},` +
	`"principal":"agent-a@p.iam.gserviceaccount.com","revokedBy":"ops@example.com","revokeReason":"disk full"}`

func TestRevokeCommand(t *testing.T) {
	f := newFake(t, false, answerLease(revokedLease))
	vars := map[string]string{"LEASESVC_URL": f.URL, "LEASESVC_TOKEN": "admin-token"}
	inv := leasectl(t, options{vars: vars}, "revoke", "jobs.a", "--reason", "disk full", "--fencing-token", "3")
	if inv.err != nil {
		t.Fatalf("revoke: %v\n%s", inv.err, inv.stderr)
	}
	r := f.requests()
	if len(r) != 1 || r[0].Method != http.MethodPost || r[0].Path != "/v1/leases/jobs.a:revoke" || r[0].Auth != "Bearer admin-token" ||
		r[0].ContentType != "application/json" || len(r[0].Body) != 2 || r[0].Body["reason"] != "disk full" || r[0].Body["fencingToken"] != 3.0 {
		t.Fatalf("revoke sent %+v", r)
	}
	for _, want := range []string{"PRINCIPAL", "agent-a@p.iam.gserviceaccount.com", "false", `jobs.a: holding 3 revoked by ops@example.com: "disk full"`} {
		if !strings.Contains(inv.stdout, want) {
			t.Errorf("the table has no %q:\n%s", want, inv.stdout)
		}
	}
	t.Logf("revoke prints:\n%s", inv.stdout)

	inv = leasectl(t, options{vars: vars}, "revoke", "--json", "jobs.a", "--reason", "disk full")
	var l client.Lease
	if inv.err != nil || json.Unmarshal([]byte(inv.stdout), &l) != nil || l.Held || l.RevokedBy != "ops@example.com" || l.RevokeReason != "disk full" {
		t.Fatalf("revoke --json: %v, %q", inv.err, inv.stdout)
	}
	if r := f.requests(); len(r[1].Body) != 1 {
		t.Fatalf("revoke without --fencing-token sent %v", r[1].Body)
	}

	for _, args := range [][]string{
		{"revoke", "jobs.a"},
		{"revoke", "--reason", "x"},
		{"revoke", "jobs.a", "--reason", "x", "--fencing-token", "-1"},
	} {
		if inv := leasectl(t, options{vars: vars}, args...); inv.code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, inv.code, exitUsage)
		}
	}
	if n := len(f.requests()); n != 2 {
		t.Fatalf("%d requests, want none sent by the usage errors", n-2)
	}
}

// TestExitStatuses: each refusal of a revoke (and of any command) has its
// exit status.
func TestExitStatuses(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		exit   int
	}{
		{404, "not_found", exitNotFound},
		{409, "lease_lost", exitLost},
		{401, "unauthenticated", exitDenied},
		{403, "permission_denied", exitDenied},
		{429, "resource_exhausted", exitUnavailable},
		{503, "unavailable", exitUnavailable},
		{400, "invalid_argument", exitFailure},
	} {
		f := newFake(t, false, answerProblem(tc.status, tc.code))
		inv := leasectl(t, options{vars: map[string]string{"LEASESVC_URL": f.URL, "LEASESVC_TOKEN": "admin-token"}},
			"revoke", "jobs.a", "--reason", "r", "--fencing-token", "3")
		if inv.code != tc.exit || !strings.Contains(inv.err.Error(), tc.code) {
			t.Errorf("revoke answered %d %s: exit %d (%v), want %d", tc.status, tc.code, inv.code, inv.err, tc.exit)
		}
	}
	// leasectl run refused for want of credentials.
	f := newFake(t, false, answerProblem(401, "unauthenticated"))
	inv := leasectl(t, options{vars: map[string]string{"LEASESVC_URL": f.URL}}, "run", "--lease", "jobs.a", "--ttl", "3s", "--", "true")
	if inv.code != exitDenied || !strings.Contains(inv.err.Error(), "LEASESVC_TOKEN") {
		t.Fatalf("run refused: exit %d, %v", inv.code, inv.err)
	}
}

// TestWatchShowsRevoked: the watch table names the operator and reason of
// a revoked event.
func TestWatchShowsRevoked(t *testing.T) {
	f := newFake(t, false, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: lease\ndata: "+heldLease+"\n\nevent: revoked\ndata: "+
			`{"type":"revoked","lease":`+revokedLease+`,"reason":"disk full","operator":"ops@example.com","eventTime":"2026-11-21T18:00:12Z"}`+"\n\n")
	})
	// The fake ends the stream after two events: the client reconnects and
	// the watch goes on; the test stops it once both are printed.
	var out syncBuffer
	e := &env{getenv: func(string) string { return "" }, stdout: &out, stderr: io.Discard}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.run(ctx, []string{"watch", "jobs.a", "--url", f.URL}) }()
	waitOutput(t, &out, `ops@example.com: "disk full"`)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "revoked") || !strings.Contains(out.String(), `agent-a (by ops@example.com: "disk full")`) {
		t.Fatalf("watch printed:\n%s", out.String())
	}
}
