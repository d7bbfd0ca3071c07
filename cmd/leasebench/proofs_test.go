package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// TestProofsScenario: the proofs scenario's arms are told apart by the
// proof in the acquire answer (it fails otherwise) and report p50, p99 and
// the difference.
func TestProofsScenario(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn"})
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"-url", svc.URL, "-json", "-scenarios", "proofs", "-n", "5"}, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 3 || rep.Results[0].N != 5 || rep.Results[0].Direct == nil {
		t.Fatalf("results %+v", rep.Results)
	}
}
