package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// sessionCase: the SDK's session (docs/contract.md §14) opens with a window
// of 1s, its deadline follows the acknowledged heartbeats, a lease acquired
// through it is session-held (a plain renew is refused as session_held),
// checkpoints and releases travel over it, and when the agent is killed
// while it holds the lease, the service frees it within the window, not
// the 30s lease TTL of a session.
func sessionCase(t *testing.T, lang language, argv []string, env map[string]string, svc *e2e.Service) {
	a, name := env["LEASE_HOLDER"], env["LEASE_NAME"]
	ag := startAgent(t, lang, argv, "session", env)
	const step = 15 * time.Second
	ag.expect(step, map[string]any{"step": "opened", "windowMs": 1000})
	ag.expect(step, map[string]any{"step": "deadline", "aheadMs": number(func(v float64) error {
		if v <= 0 || v > 900 {
			return fmt.Errorf("the deadline is %v ms ahead: want within the window × (1 − 0.1) of an acknowledged heartbeat", v)
		}
		return nil
	})})
	ag.expect(step, map[string]any{"step": "acquire", "holder": a, "token": 1, "held": true, "session": true, "sessionWindowMs": 1000})
	ag.expect(step, map[string]any{"step": "renew_plain", "error": "session_held"})
	ag.expect(step, map[string]any{"step": "acquire_other", "error": "lease_held", "holder": a})
	ag.expect(step, map[string]any{"step": "checkpoint", "token": 1, "checkpointN": 1})
	ag.expect(step, map[string]any{"step": "release", "held": false, "checkpointN": 2})
	ag.expect(step, map[string]any{"step": "holding", "token": 2})

	if err := ag.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	c := driverClient(t, svc.URL, "")
	l, err := c.Acquire(t.Context(), name, client.AcquireRequest{Holder: "driver", TTL: time.Minute, Wait: 10 * time.Second})
	freed := time.Since(killed)
	if err != nil || l.FencingToken != 3 {
		t.Fatalf("%s: the driver's waiting acquire after the kill: %+v, %v\nstderr:\n%s", ag.label, l, err, ag.stderr)
	}
	// The window (1s) after the last heartbeat, and the release: far below
	// the session lease TTL (30s) a crash would cost without a session.
	if freed > 3*time.Second {
		t.Fatalf("%s: the lease freed %v after the agent was killed, want within its session's window (1s) and a margin", ag.label, freed)
	}
	t.Logf("%s: the lease freed %v after the agent was killed", ag.label, freed.Round(time.Millisecond))
	<-ag.done
}
