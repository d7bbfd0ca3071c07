package conformance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// refusal matches the message of a refused proof: it says it is the
// fence's, and why.
var refusal = text(func(s string) error {
	if !strings.HasPrefix(s, "fence: ") || len(s) < len("fence: ")+10 {
		return fmt.Errorf("%q: want the refusal's message, \"fence: …\" with its reason", s)
	}
	return nil
})

// fenceCase runs the fence case of PROTOCOL.md (docs/contract.md §17): a
// proof the running service made (the agent's own, and the driver's)
// verifies in the agent's SDK through the service's JWKS, and its SDK
// refuses a tampered payload, a wrong signature, an unknown kid, a proof
// for another lease, a lower token after a higher one (Guard), a bare
// number and no proof, each with the same reason in every language.
func fenceCase(t *testing.T, lang language, argv []string, env map[string]string, svc *e2e.Service) {
	a, name := env["LEASE_HOLDER"], env["LEASE_NAME"]
	c := driverClient(t, svc.URL, "")
	d, err := c.Acquire(t.Context(), name+"-driver", client.AcquireRequest{Holder: "driver", TTL: time.Minute})
	if err != nil || d.Proof == "" {
		t.Fatalf("the driver's acquire: proof %v, %v; want a proof", d.Proof, err)
	}
	ag := startAgent(t, lang, argv, "fence", with(env, "LEASE_PROOF", string(d.Proof)))
	const step = 15 * time.Second
	ag.expect(step, map[string]any{"step": "verify", "lease": name, "holder": a, "token": 1})
	ag.expect(step, map[string]any{"step": "verify_driver", "lease": name + "-driver", "holder": "driver", "token": 1})
	ag.expect(step, map[string]any{"step": "tampered", "error": "bad_signature", "message": refusal})
	ag.expect(step, map[string]any{"step": "wrong_signature", "error": "bad_signature", "message": refusal})
	ag.expect(step, map[string]any{"step": "unknown_kid", "error": "unknown_key", "message": refusal})
	ag.expect(step, map[string]any{"step": "guard", "token": 1})
	ag.expect(step, map[string]any{"step": "other_lease", "error": "other_lease", "message": refusal})
	ag.expect(step, map[string]any{"step": "next_holder", "holder": a + "-b", "token": 2})
	ag.expect(step, map[string]any{"step": "stale", "error": "stale", "message": refusal})
	ag.expect(step, map[string]any{"step": "forged", "error": "malformed", "message": refusal})
	ag.expect(step, map[string]any{"step": "missing", "error": "missing", "message": refusal})
	ag.expect(step, map[string]any{"step": "highest", "token": 2})
	ag.expect(step, map[string]any{"step": "done"})
	ag.exit(10 * time.Second)
}
