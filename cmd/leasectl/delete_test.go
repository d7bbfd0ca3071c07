package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestDeleteCommand: delete sends DELETE /v1/leases/NAME with no body and
// prints the lease as it was; a held lease exits 3 and a missing one 5.
func TestDeleteCommand(t *testing.T) {
	f := newFake(t, false, answerLease(revokedLease))
	vars := map[string]string{"LEASESVC_URL": f.URL, "LEASESVC_TOKEN": "janitor-token"}
	inv := leasectl(t, options{vars: vars}, "delete", "jobs.a", "--json")
	if inv.err != nil {
		t.Fatalf("delete: %v\n%s", inv.err, inv.stderr)
	}
	r := f.requests()
	if len(r) != 1 || r[0].Method != http.MethodDelete || r[0].Path != "/v1/leases/jobs.a" || r[0].Auth != "Bearer janitor-token" || r[0].Body != nil {
		t.Fatalf("delete sent %+v", r)
	}
	var l map[string]any
	if err := json.Unmarshal([]byte(inv.stdout), &l); err != nil || l["name"] != "jobs.a" || l["fencingToken"] != 3.0 {
		t.Fatalf("delete --json printed %q (%v)", inv.stdout, err)
	}
	if inv := leasectl(t, options{vars: vars}, "delete"); inv.code != exitUsage {
		t.Errorf("delete without NAME: exit %d, want %d", inv.code, exitUsage)
	}

	held := newFake(t, false, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, `{"type":"urn:leasesvc:problem:lease_held","status":409,"code":"lease_held","detail":"held","lease":`+heldLease+`}`)
	})
	for _, tc := range []struct {
		url  string
		exit int
	}{{held.URL, exitHeld}, {newFake(t, false, answerProblem(404, "not_found")).URL, exitNotFound}} {
		inv := leasectl(t, options{vars: map[string]string{"LEASESVC_URL": tc.url}}, "delete", "jobs.a")
		if inv.code != tc.exit {
			t.Errorf("delete refused: exit %d (%v), want %d", inv.code, inv.err, tc.exit)
		}
		// One sentence that says what to do, not the client's error twice
		// ("leasesvc: … leasesvc: …").
		if msg := inv.err.Error(); tc.exit == exitHeld && (!strings.Contains(msg, "held by") || !strings.Contains(msg, "release it first") || strings.Contains(msg, "leasesvc:")) {
			t.Errorf("delete of a held lease: %v", inv.err)
		}
	}
}
