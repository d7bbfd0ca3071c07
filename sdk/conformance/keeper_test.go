package conformance

import (
	"fmt"
	"time"

	"testing"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// keeperCase runs the keeper case of PROTOCOL.md in both modes: the
// agent's Keeper holds LEASE_NAME, moves its deadline by itself, writes a
// checkpoint, reports the loss the driver's revoke causes, holds it again
// and releases it with a checkpoint (issue 38: the keeper's phases are the
// same in every language).
func keeperCase(t *testing.T, lang language, argv []string, env map[string]string, svc *e2e.Service) {
	for _, mode := range []string{"plain", "session"} {
		t.Run(mode, func(t *testing.T) {
			keeperRun(t, lang, argv, with(env, "LEASE_NAME", e2e.UniqueName("keeper-"+mode), "LEASE_KEEPER", mode), svc, mode)
		})
	}
}

func keeperRun(t *testing.T, lang language, argv []string, env map[string]string, svc *e2e.Service, mode string) {
	c := driverClient(t, svc.URL, driverToken)
	span, lostBound := ttl, ttl/3+time.Second
	if mode == "session" {
		span, lostBound = time.Second, time.Second
	}
	ahead := func(most time.Duration) number {
		return func(v float64) error {
			if v <= 0 || v > float64(most.Milliseconds()) {
				return fmt.Errorf("aheadMs %v, want within (0, %d]", v, most.Milliseconds())
			}
			return nil
		}
	}
	safe := time.Duration(float64(span) * (1 - client.DefaultDriftMargin))
	const step = 15 * time.Second
	ag := startAgent(t, lang, argv, "keeper", env)
	ag.expect(step, map[string]any{"step": "keeper", "mode": mode})
	ag.expect(step, map[string]any{"step": "held", "token": 1, "mode": mode, "aheadMs": ahead(safe)})
	ag.expect(step, map[string]any{"step": "moved", "token": 1, "aheadMs": ahead(safe)})
	ag.expect(step, map[string]any{"step": "checkpoint", "token": 1, "checkpointN": 1})
	if _, err := c.Revoke(t.Context(), env["LEASE_NAME"], client.RevokeRequest{Reason: "conformance", FencingToken: 1}); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	ag.expect(lostBound+2*time.Second, map[string]any{"step": "lost", "token": 1, "error": "lease_lost"})
	if took := time.Since(revoked); took > lostBound {
		t.Errorf("%s/keeper/%s: the loss was reported %v after the revoke, want within %v", lang.name, mode, took, lostBound)
	}
	ag.expect(step, map[string]any{"step": "held", "token": 2, "mode": mode, "aheadMs": ahead(safe)})
	ag.expect(step, map[string]any{"step": "released", "held": false, "checkpointN": 2})
	ag.expect(step, map[string]any{"step": "done"})
	ag.exit(10 * time.Second)
	if l, err := c.Get(t.Context(), env["LEASE_NAME"]); err != nil || l.Held || string(l.Checkpoint) != `{"n":2}` {
		t.Errorf("%s/keeper/%s: after the release the lease is %+v (%v), want free with checkpoint {\"n\":2}", lang.name, mode, l, err)
	}
}
