package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// Each agent's principal and token, and the driver's (admin).
const (
	driverToken = "driver-token-0123456789abcdef"
	// freezeRuns is how many times the freeze case runs per language.
	freezeRuns = 20
	// freezeTTL is the TTL of the freeze case: renewals every ~667 ms, the
	// safe deadline 1.8 s after a renew was sent.
	freezeTTL = 2 * time.Second
	// ttl is the TTL of the other cases.
	ttl = 3 * time.Second
)

func agentToken(lang string) string { return "agent-" + lang + "-token-0123456789" }

// authFiles writes the static tokens file and the policy: each agent may
// acquire every name, the driver is admin.
func authFiles(t testing.TB) map[string]string {
	t.Helper()
	dir := t.TempDir()
	tokens := "tokens:\n  - {principal: driver, token: " + driverToken + "}\n"
	for _, l := range languages {
		tokens += fmt.Sprintf("  - {principal: agent-%s, token: %s}\n", l.name, agentToken(l.name))
	}
	policy := "grants:\n  - {principals: [driver], verbs: [admin], prefixes: [\"*\"]}\n"
	for _, l := range languages {
		policy += fmt.Sprintf("  - {principals: [agent-%s], verbs: [acquire], prefixes: [\"*\"]}\n", l.name)
	}
	tf, pf := filepath.Join(dir, "tokens.yaml"), filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(tf, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pf, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"LEASESVC_AUTH": "static", "LEASESVC_AUTH_TOKENS": tf, "LEASESVC_POLICY": pf}
}

func driverClient(t testing.TB, url, token string) *client.Client {
	t.Helper()
	cfg := client.Config{}
	if token != "" {
		cfg.TokenSource = client.StaticToken(token)
	}
	c, err := client.New(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func with(env map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// TestConformance runs every case for every language, the languages in
// parallel. Each language has a service of its own for the cases without
// authentication (the freeze case stops the whole process); the rate-limit
// and revoke cases share one service each, with a principal per language.
func TestConformance(t *testing.T) {
	auth := authFiles(t)
	limited := startService(t, with(auth, "LEASESVC_RATE_LIMIT", "1", "LEASESVC_RATE_BURST", "1"))
	revoking := startService(t, auth)
	for _, lang := range languages {
		t.Run(lang.name, func(t *testing.T) {
			t.Parallel()
			argv := lang.prepare(t)
			plain := startService(t, nil)
			base := func(name string) map[string]string {
				return map[string]string{
					"LEASESVC_URL": plain.URL, "LEASESVC_TOKEN": "", "LEASE_NAME": e2e.UniqueName(name),
					"LEASE_HOLDER": "agent-" + lang.name, "LEASE_TTL_MS": strconv.FormatInt(ttl.Milliseconds(), 10),
				}
			}
			t.Run("basic", func(t *testing.T) { basicCase(t, lang, argv, base("basic")) })
			t.Run("wait", func(t *testing.T) { waitCase(t, lang, argv, base("wait"), plain) })
			t.Run("delete", func(t *testing.T) { deleteCase(t, lang, argv, base("delete")) })
			t.Run("succession", func(t *testing.T) { successionCase(t, lang, argv, base("succession"), plain) })
			t.Run("fence", func(t *testing.T) { fenceCase(t, lang, argv, base("fence"), plain) })
			t.Run("ratelimit", func(t *testing.T) {
				ratelimitCase(t, lang, argv, with(base("ratelimit"), "LEASESVC_URL", limited.URL, "LEASESVC_TOKEN", agentToken(lang.name)), limited)
			})
			t.Run("revoke", func(t *testing.T) {
				revokeCase(t, lang, argv, with(base("revoke"), "LEASESVC_URL", revoking.URL, "LEASESVC_TOKEN", agentToken(lang.name)), revoking)
			})
			t.Run("keeper", func(t *testing.T) {
				keeperCase(t, lang, argv, with(base("keeper"), "LEASESVC_URL", revoking.URL, "LEASESVC_TOKEN", agentToken(lang.name)), revoking)
			})
			t.Run("freeze", func(t *testing.T) { freezeCase(t, lang, argv, base, plain) })
			if lang.sessions {
				t.Run("session", func(t *testing.T) { sessionCase(t, lang, argv, base("session"), plain) })
			}
			if lang.lifecycle {
				lifecycleCases(t, lang, argv, base, auth, revoking)
			}
		})
	}
}

func basicCase(t *testing.T, lang language, argv []string, env map[string]string) {
	a, b := env["LEASE_HOLDER"], env["LEASE_HOLDER"]+"-b"
	ag := startAgent(t, lang, argv, "basic", env)
	const step = 15 * time.Second
	ag.expect(step, map[string]any{"step": "acquire", "holder": a, "token": 1, "held": true})
	ag.expect(step, map[string]any{"step": "acquire_other", "error": "lease_held", "holder": a})
	ag.expect(step, map[string]any{"step": "acquire_again", "token": 1})
	ag.expect(step, map[string]any{"step": "renew", "token": 1})
	ag.expect(step, map[string]any{"step": "renew_wrong_token", "error": "lease_lost"})
	ag.expect(step, map[string]any{"step": "release", "token": 1, "held": false})
	ag.expect(step, map[string]any{"step": "renew_after_release", "error": "lease_lost"})
	ag.expect(step, map[string]any{"step": "acquire_other", "holder": b, "token": 2})
	ag.expect(step, map[string]any{"step": "get", "holder": b, "token": 2, "held": true})
	ag.expect(step, map[string]any{"step": "get_missing", "error": "not_found"})
	ag.expect(step, map[string]any{"step": "done"})
	ag.exit(10 * time.Second)
}

// deleteCase: the SDK's delete refuses a held lease, deletes a free one,
// reports a deleted one as not found, and the name's next holding gets the
// next token (docs/contract.md §15).
func deleteCase(t *testing.T, lang language, argv []string, env map[string]string) {
	a, b := env["LEASE_HOLDER"], env["LEASE_HOLDER"]+"-b"
	ag := startAgent(t, lang, argv, "delete", env)
	const step = 15 * time.Second
	ag.expect(step, map[string]any{"step": "acquire", "token": 1})
	ag.expect(step, map[string]any{"step": "delete_held", "error": "lease_held", "holder": a})
	ag.expect(step, map[string]any{"step": "release", "held": false})
	ag.expect(step, map[string]any{"step": "delete", "holder": a, "token": 1, "held": false})
	ag.expect(step, map[string]any{"step": "get_deleted", "error": "not_found"})
	ag.expect(step, map[string]any{"step": "delete_again", "error": "not_found"})
	ag.expect(step, map[string]any{"step": "acquire_after", "holder": b, "token": 2})
	ag.expect(step, map[string]any{"step": "done"})
	ag.exit(10 * time.Second)
}

func waitCase(t *testing.T, lang language, argv []string, env map[string]string, svc *e2e.Service) {
	name := env["LEASE_NAME"]
	c := driverClient(t, svc.URL, "")
	held, err := c.Acquire(t.Context(), name, client.AcquireRequest{Holder: "driver", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ag := startAgent(t, lang, argv, "wait", env)
	ag.expect(15*time.Second, map[string]any{"step": "waiting"})
	time.Sleep(500 * time.Millisecond)
	if _, err := c.Release(t.Context(), name, "driver", held.FencingToken); err != nil {
		t.Fatal(err)
	}
	ag.expect(10*time.Second, map[string]any{"step": "acquired", "token": 2, "waitedMs": number(func(v float64) error {
		if v < 300 || v >= 10000 {
			return fmt.Errorf("waited %v ms: want the ~500 ms until the driver released, not an immediate or a timed-out answer", v)
		}
		return nil
	})})
	ag.expect(5*time.Second, map[string]any{"step": "done"})
	ag.exit(10 * time.Second)
}

func ratelimitCase(t *testing.T, lang language, argv []string, env map[string]string, svc *e2e.Service) {
	c := driverClient(t, svc.URL, driverToken)
	if _, err := c.Acquire(t.Context(), env["LEASE_NAME"], client.AcquireRequest{Holder: "driver", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ag := startAgent(t, lang, argv, "ratelimit", env)
	ag.expect(30*time.Second, map[string]any{"step": "done", "ok": 3, "elapsedMs": number(func(v float64) error {
		if v < 1500 {
			return fmt.Errorf("3 gets at 1/s with a burst of 1 took %v ms: the 429s' Retry-After (1 s each) was not waited out", v)
		}
		return nil
	})})
	ag.exit(10 * time.Second)
}

func revokeCase(t *testing.T, lang language, argv []string, env map[string]string, svc *e2e.Service) {
	c := driverClient(t, svc.URL, driverToken)
	ag := startAgent(t, lang, argv, "revoke", env)
	ag.expect(15*time.Second, map[string]any{"step": "leading", "token": 1})
	time.Sleep(200 * time.Millisecond)
	if _, err := c.Revoke(t.Context(), env["LEASE_NAME"], client.RevokeRequest{Reason: "conformance", FencingToken: 1}); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	bound := ttl/3 + time.Second
	ag.expect(bound+2*time.Second, map[string]any{"step": "stopped", "reason": "lease_lost"})
	if took := time.Since(revoked); took > bound {
		t.Errorf("%s/revoke: leading ended %v after the revoke, want within TTL/3 + 1 s = %v", lang.name, took, bound)
	}
	ag.expect(15*time.Second, map[string]any{"step": "leading", "token": 2})
	ag.stop(15 * time.Second)
}

// freezeCase runs the freeze case freezeRuns times and asserts each run's
// X < T × (1 − D).
func freezeCase(t *testing.T, lang language, argv []string, base func(string) map[string]string, svc *e2e.Service) {
	// One language's freeze runs at a time, and none beside the safety
	// runs of emulator-tests: three languages' agents, their services and
	// timers at once on a small machine, or a fault-injected run loading
	// every core, starve the agent, and the bound measured is the SDK's,
	// not the machine's.
	e2e.Exclusive(t, "timing")
	var xs []float64
	bound := float64(freezeTTL.Milliseconds()) * (1 - client.DefaultDriftMargin)
	for run := range freezeRuns {
		env := with(base("freeze"), "LEASE_TTL_MS", strconv.FormatInt(freezeTTL.Milliseconds(), 10))
		x := freezeOnce(t, lang, argv, env, svc, run, bound)
		xs = append(xs, x)
	}
	slices.Sort(xs)
	t.Logf("freeze %s: %d runs, X (ms from the last successful renew's send to the end of leading) min %.1f, median %.1f, max %.1f; bound T × (1 − D) = %.0f",
		lang.name, len(xs), xs[0], xs[len(xs)/2], xs[len(xs)-1], bound)
}

func freezeOnce(t *testing.T, lang language, argv []string, env map[string]string, svc *e2e.Service, run int, bound float64) float64 {
	t.Helper()
	ag := startAgent(t, lang, argv, "freeze", env)
	ag.label += "#" + strconv.Itoa(run+1)
	defer func() { _ = svc.Thaw() }()
	ag.expect(15*time.Second, map[string]any{"step": "leading", "token": 1})
	ag.expect(10*time.Second, map[string]any{"step": "renewed", "sentMs": number(func(float64) error { return nil })})
	svc.Freeze(t)
	frozen := time.Now()
	var line map[string]any
	for {
		line = ag.next(10 * time.Second)
		if line["step"] != "renewed" { // a renew answered just before the freeze
			break
		}
	}
	var x float64
	ag.check(line, map[string]any{"step": "stopped", "ttlMs": int(freezeTTL.Milliseconds()), "driftMargin": client.DefaultDriftMargin,
		"sinceLastSentMs": number(func(v float64) error {
			x = v
			if v >= bound {
				return fmt.Errorf("leading ended %.1f ms after the last successful renew was sent, want < T × (1 − D) = %.0f ms", v, bound)
			}
			if v <= 0 {
				return errors.New("not positive")
			}
			return nil
		})})
	t.Logf("freeze %s run %d: X = %.1f ms (bound %.0f), stopped %v after SIGSTOP", lang.name, run+1, x, bound, time.Since(frozen).Round(time.Millisecond))
	_ = svc.Thaw()
	ag.stop(20 * time.Second)
	return x
}

// TestPythonUnittest runs the Python SDK's own suite (python3 -m unittest
// discover in sdk/python) with the service binary this module builds.
func TestPythonUnittest(t *testing.T) {
	t.Parallel()
	py := need(t, "python3", "apt-get install -y python3 (3.9 or newer)")
	bin := e2e.Binary(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v")
	cmd.Dir = filepath.Join(repoRoot(), "sdk", "python")
	cmd.Env = append(os.Environ(), "LEASESVC_BIN="+bin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest discover in sdk/python: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
