package client

import (
	"encoding/json"
	"testing"
)

// TestResumedLeasesCarryProofs: a resume's answer lists the holdings it
// restarted, each with its proof (docs/contract.md §17), and the session
// reads them with it, as it reads an acquire's.
func TestResumedLeasesCarryProofs(t *testing.T) {
	var m inMsg
	raw := `{"type":"resumed","sessionId":"s","epoch":2,"leases":[{"name":"a","holder":"h","fencingToken":3,"held":true,"proof":"eyJ.x.y"}],"lost":[]}`
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Leases) != 1 || m.Leases[0].Proof != "eyJ.x.y" {
		t.Fatalf("resumed leases %+v; want lease a with its proof", m.Leases)
	}
	var out map[string]any
	b, _ := json.Marshal(m.Leases[0])
	if err := json.Unmarshal(b, &out); err != nil || out["proof"] != "eyJ.x.y" {
		t.Fatalf("the lease's JSON %s lost its proof (%v)", b, err)
	}
}
