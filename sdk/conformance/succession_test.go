package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// candidateHolder is the driver's preempting candidate in the succession case.
const candidateHolder = "driver-candidate"

// rawAcquire sends one acquire as raw HTTP (the driver's candidate carries a
// priority and preempt, docs/contract.md §8) and returns the status and the
// decoded answer.
func rawAcquire(svc *e2e.Service, name string, body map[string]any) (int, map[string]any, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.Post(svc.URL+"/v1/leases/"+url.PathEscape(name)+":acquire", "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, nil, fmt.Errorf("acquire %s: %w", name, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("acquire %s: %w", name, err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("acquire %s: decode %q: %w", name, raw, err)
	}
	return resp.StatusCode, out, nil
}

// successionCase runs the succession case of PROTOCOL.md: a priority
// recorded on the holding, a transfer whose successor acquires with token
// + 1 and the checkpoint while a third party sees lease_reserved, and a
// renew answering yieldRequested while the driver's preempting candidate
// of higher priority waits; the candidate then gets the lease with the
// checkpoint the agent released with.
func successionCase(t *testing.T, lang language, argv []string, env map[string]string, svc *e2e.Service) {
	a := env["LEASE_HOLDER"]
	b := a + "-b"
	ag := startAgent(t, lang, argv, "succession", env)
	const step = 15 * time.Second
	ag.expect(step, map[string]any{"step": "acquire_priority", "token": 1, "priority": 7})
	ag.expect(step, map[string]any{"step": "transfer", "held": false, "reservedFor": b})
	ag.expect(step, map[string]any{"step": "acquire_reserved", "error": "lease_reserved", "reservedFor": b})
	ag.expect(step, map[string]any{"step": "successor", "holder": b, "token": 2, "checkpointN": 1, "checkpointToken": 1})
	ag.expect(step, map[string]any{"step": "holding", "token": 1, "priority": 1})

	type answer struct {
		status int
		lease  map[string]any
		err    error
	}
	got := make(chan answer, 1)
	go func() {
		status, l, err := rawAcquire(svc, env["LEASE_NAME"]+"-yield", map[string]any{
			"holder": candidateHolder, "ttlMs": 5000, "waitMs": 10000, "priority": 9, "preempt": true})
		got <- answer{status, l, err}
	}()
	ag.expect(step, map[string]any{"step": "yield_requested", "yieldRequested": true, "yieldTo": candidateHolder, "candidates": 1})
	ag.expect(step, map[string]any{"step": "released", "held": false, "checkpointN": 2})
	ag.expect(step, map[string]any{"step": "done"})
	ag.exit(10 * time.Second)

	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("%s/succession: the driver's candidate: %v", lang.name, r.err)
		}
		cp, _ := r.lease["checkpoint"].(map[string]any)
		if r.status != http.StatusOK || r.lease["holder"] != candidateHolder || r.lease["fencingToken"] != 2.0 ||
			r.lease["priority"] != 9.0 || cp["n"] != 2.0 {
			t.Errorf("%s/succession: the driver's preempting candidate got %d %v, want 200 with holder %s, token 2, priority 9 and checkpoint {\"n\":2}",
				lang.name, r.status, r.lease, candidateHolder)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("%s/succession: the driver's waiting acquire did not answer after the agent released", lang.name)
	}
}
