package conformance

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// The lifecycle cases pin what every SDK's keeper does where the three
// once differed (issue 46; PROTOCOL.md "The keeper's lifecycle"): when
// the mode is chosen, who reopens a session the service ended, what a
// CancelBefore too large for the span does, and when renewal starts and
// stops. Each runs in the language's subtest, against a service of its
// own where it needs one.
func lifecycleCases(t *testing.T, lang language, argv []string, base func(string) map[string]string, auth map[string]string, revoking *e2e.Service) {
	authed := func(name string) map[string]string {
		return with(base(name), "LEASESVC_URL", revoking.URL, "LEASESVC_TOKEN", agentToken(lang.name))
	}
	t.Run("lifecycle_limit", func(t *testing.T) {
		limited := startService(t, with(auth, "LEASESVC_MAX_SESSIONS_PER_CALLER", "1"))
		env := with(authed("lifecycle-limit"), "LEASESVC_URL", limited.URL)
		lifecycleLimit(t, lang, argv, env, limited)
	})
	t.Run("lifecycle_reopen", func(t *testing.T) { lifecycleReopen(t, lang, argv, authed("lifecycle-reopen"), revoking) })
	t.Run("lifecycle_cancel", func(t *testing.T) {
		for _, c := range []struct {
			mode         string
			big, fitting time.Duration
		}{{"plain", 2 * time.Second, 500 * time.Millisecond}, {"session", 600 * time.Millisecond, 100 * time.Millisecond}} {
			t.Run(c.mode, func(t *testing.T) {
				env := with(authed("lifecycle-cancel-"+c.mode), "LEASE_KEEPER", c.mode)
				lifecycleCancel(t, lang, argv, env, c.big, c.fitting)
			})
		}
	})
	t.Run("lifecycle_renewal", func(t *testing.T) {
		env := with(authed("lifecycle-renewal"), "LEASE_KEEPER", "plain", "LEASE_TTL_MS", "1500")
		lifecycleRenewal(t, lang, argv, env, revoking)
	})
}

// lifecycleLimit: a keeper refused a session at the service's session
// limit holds by plain renewals, says so with the reason code
// session_limit, and keeps that mode for its life even after a session
// slot frees (L1).
func lifecycleLimit(t *testing.T, lang language, argv []string, env map[string]string, svc *e2e.Service) {
	agentC := driverClient(t, svc.URL, env["LEASESVC_TOKEN"])
	s, err := agentC.OpenSession(t.Context(), client.SessionConfig{Window: time.Second})
	if err != nil {
		t.Fatalf("the driver's session as the agent's principal: %v", err)
	}
	const step = 15 * time.Second
	ag := startAgent(t, lang, argv, "lifecycle_limit", env)
	ag.expect(step, map[string]any{"step": "held", "token": 1, "mode": "plain", "reason": "session_limit"})
	ag.expect(step, map[string]any{"step": "waiting"})
	if err := s.Close(t.Context()); err != nil {
		t.Fatalf("closing the driver's session: %v", err)
	}
	// The slot is free again (a session opens), and free when the agent
	// goes on: a keeper that chose its mode anew would get a session now.
	for try := 0; ; try++ {
		s, err = agentC.OpenSession(t.Context(), client.SessionConfig{Window: time.Second})
		if !errors.Is(err, client.ErrSessionLimit) || try == 20 {
			break
		}
		time.Sleep(100 * time.Millisecond) // the closed session's slot is given back after its close
	}
	if err != nil {
		t.Fatalf("after the driver's session closed, a session slot should be free: %v", err)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatalf("closing the driver's second session: %v", err)
	}
	_, _ = fmt.Fprintln(ag.stdin, "go")
	ag.expect(step, map[string]any{"step": "held2", "token": 1, "mode": "plain"})
	ag.expect(step, map[string]any{"step": "done"})
	ag.exit(10 * time.Second)
}

// lifecycleReopen: an agent paused past its window has its session ended
// by the service; the holdings of that session end with the lost error,
// and the keeper opens a new session at its next hold, so the Elector
// over it leads again instead of returning (L2).
func lifecycleReopen(t *testing.T, lang language, argv []string, env map[string]string, svc *e2e.Service) {
	name := env["LEASE_NAME"]
	c := driverClient(t, svc.URL, driverToken)
	const step = 15 * time.Second
	ag := startAgent(t, lang, argv, "lifecycle_reopen", env)
	want := map[string]map[string]any{
		"leading": {"step": "leading", "token": 1, "mode": "session"},
		"holding": {"step": "holding", "token": 1},
	}
	expectAnyOrder(ag, step, want)
	if err := ag.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	freed := false
	for !freed && time.Since(paused) < 3*time.Second {
		time.Sleep(100 * time.Millisecond)
		l, err := c.Get(t.Context(), name)
		h, herr := c.Get(t.Context(), name+"-h")
		freed = err == nil && herr == nil && !l.Held && !h.Held
	}
	for time.Since(paused) < 3*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	if err := ag.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !freed {
		t.Errorf("%s: the service did not free the paused agent's leases within 3 s (window 1 s)", ag.label)
	}
	expectAnyOrder(ag, step, map[string]map[string]any{
		"stopped": {"step": "stopped"},
		"lost":    {"step": "lost", "token": 1, "error": "lease_lost"},
	})
	ag.expect(10*time.Second, map[string]any{"step": "leading", "token": 2, "mode": "session"})
	if l, err := c.Get(t.Context(), name); err != nil || !l.Held || l.FencingToken != 2 || !l.Session {
		t.Errorf("%s: after leading again the lease is %+v (%v), want held through a session with token 2", ag.label, l, err)
	}
	ag.stop(15 * time.Second)
}

// lifecycleCancel: a CancelBefore that does not fit the keeper's span is
// an invalid-argument error, never capped; one that fits leads (L3).
func lifecycleCancel(t *testing.T, lang language, argv []string, env map[string]string, big, fitting time.Duration) {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	const step = 15 * time.Second
	t.Run("too_large", func(t *testing.T) {
		ag := startAgent(t, lang, argv, "lifecycle_cancel", with(env, "LEASE_CANCEL_BEFORE_MS", ms(big)))
		ag.expect(step, map[string]any{"step": "refused", "error": "invalid_argument", "message": text(func(s string) error {
			if !strings.Contains(strings.ToLower(s), "cancel") {
				return errors.New("the message does not name CancelBefore")
			}
			return nil
		})})
		ag.exit(10 * time.Second)
	})
	t.Run("fits", func(t *testing.T) {
		ag := startAgent(t, lang, argv, "lifecycle_cancel", with(env, "LEASE_NAME", env["LEASE_NAME"]+"-fits", "LEASE_CANCEL_BEFORE_MS", ms(fitting)))
		ag.expect(step, map[string]any{"step": "leading", "token": 1})
		ag.stop(15 * time.Second)
	})
}

// lifecycleRenewal: the keeper renews what it hands out without its owner
// renewing, and closing the keeper releases it and stops the renewals (L4).
func lifecycleRenewal(t *testing.T, lang language, argv []string, env map[string]string, svc *e2e.Service) {
	name, holder := env["LEASE_NAME"], env["LEASE_HOLDER"]
	c := driverClient(t, svc.URL, driverToken)
	const step = 15 * time.Second
	ag := startAgent(t, lang, argv, "lifecycle_renewal", env)
	ag.expect(step, map[string]any{"step": "held", "token": 1})
	ag.expect(step, map[string]any{"step": "slept", "held": true, "token": 1})
	if l, err := c.Get(t.Context(), name); err != nil || !l.Held || l.Holder != holder || l.FencingToken != 1 {
		t.Fatalf("%s: after 3 TTLs without the owner renewing, the lease is %+v (%v), want held by %s with token 1", ag.label, l, err, holder)
	}
	_, _ = fmt.Fprintln(ag.stdin, "go")
	ag.expect(step, map[string]any{"step": "closed"})
	if l, err := c.Get(t.Context(), name); err != nil || l.Held {
		t.Fatalf("%s: after the keeper closed, the lease is %+v (%v), want released", ag.label, l, err)
	}
	time.Sleep(1500 * time.Millisecond)
	if l, err := c.Get(t.Context(), name); err != nil || l.Held || l.FencingToken != 1 {
		t.Errorf("%s: a TTL after the keeper closed, the lease is %+v (%v), want still free at token 1", ag.label, l, err)
	}
	ag.stop(15 * time.Second)
}

// expectAnyOrder reads len(want) lines and checks each against the want
// of its step, in whatever order they come.
func expectAnyOrder(ag *agent, timeout time.Duration, want map[string]map[string]any) {
	ag.t.Helper()
	left := len(want)
	for left > 0 {
		got := ag.next(timeout)
		step, _ := got["step"].(string)
		w, ok := want[step]
		if !ok {
			ag.fail("step %q, want one of the steps still expected (%d left)", step, left)
		}
		ag.check(got, w)
		delete(want, step)
		left--
	}
}
