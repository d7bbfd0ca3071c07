package leasemcp_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/leasemcp"
)

// TestInstructionsAskForProofs (issue 39 item 5): the server's
// instructions tell the model to pass the proof, never a bare number, to
// tools that write.
func TestInstructionsAskForProofs(t *testing.T) {
	s := offlineSession(t)
	in := s.cs.InitializeResult().Instructions
	if !strings.Contains(in, "pass the proof, never a bare token number, to every tool that writes") {
		t.Fatalf("the instructions do not ask for proofs: %s", in)
	}
}

// TestHoldingsCarryProofs (issue 39 item 5): the holding a tool gives, and
// every holding listed under "held", carries the proof the service signed
// for it (docs/contract.md §17).
func TestHoldingsCarryProofs(t *testing.T) {
	svc := startService(t)
	s := startInProcess(t, svc.URL, "prover", 10*time.Second)
	name := e2e.UniqueName("mcp.proof")
	var acq leasemcp.AcquireOutput
	s.mustCall("lease_acquire", map[string]any{"name": name}, &acq)
	parts := strings.Split(acq.Proof, ".")
	if !acq.Acquired || len(parts) != 3 {
		t.Fatalf("acquire: %+v, want a compact JWS as proof", acq)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	var claims struct {
		Lease        string `json:"lease"`
		FencingToken int64  `json:"fencingToken"`
		Holder       string `json:"holder"`
	}
	if err != nil || json.Unmarshal(payload, &claims) != nil || claims.Lease != name || claims.FencingToken != acq.FencingToken || claims.Holder != "prover" {
		t.Fatalf("the proof's payload %s (%v) is not of this holding", payload, err)
	}
	var held leasemcp.HeldOutput
	s.mustCall("lease_held", map[string]any{}, &held)
	if len(held.Held) != 1 || held.Held[0].Proof != acq.Proof || len(held.Leases) != 1 || held.Leases[0].Proof != acq.Proof {
		t.Fatalf("lease_held: %+v, want the holding with its proof", held)
	}
}

// TestMCPSaysTTLDoesNotApply (issue 38 item 2): leasectl mcp --ttl through
// a session, where the TTL is not used, says so on stderr rather than
// accept it in silence.
func TestMCPSaysTTLDoesNotApply(t *testing.T) {
	svc := startService(t)
	s := startSession(t, svc.URL, "ttl-said", 10*time.Second)
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(s.stderr.String(), "--ttl 10s does not apply") })
}
