package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// writeFile writes content to a file in a test directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	svcTokens = "tokens:\n  - {principal: agent@example.com, token: agent-token-0123456789}\n  - {principal: oncall@example.com, token: oncall-token-012345678}\n"
	svcPolicy = "grants:\n  - principals: [agent@example.com]\n    verbs: [acquire]\n    prefixes: [\"*\"]\n  - principals: [oncall@example.com]\n    verbs: [admin]\n    prefixes: [\"*\"]\n"
)

// TestServiceWithStaticAuth runs the real binary with LEASESVC_AUTH=static
// and a policy: the whole contract flow passes for an allowed principal,
// a request without credentials is 401, an operator revokes, and each
// change of holding and each refusal writes one audit line, even with the
// log level at warn.
func TestServiceWithStaticAuth(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{
		"LEASESVC_AUTH":        "static",
		"LEASESVC_AUTH_TOKENS": writeFile(t, "tokens.yaml", svcTokens),
		"LEASESVC_POLICY":      writeFile(t, "policy.yaml", svcPolicy),
		"LEASESVC_LOG_LEVEL":   "warn",
	})
	agent := e2e.Client{URL: svc.URL, Token: "agent-token-0123456789"}
	e2e.FlowsWith(t, agent)

	name := e2e.UniqueName("audited")
	if r := (e2e.Client{URL: svc.URL}).Post(t, "/v1/leases/"+name+":acquire", `{"holder":"x","ttlMs":30000}`); r.Status != 401 {
		t.Fatalf("acquire without credentials = %d %s, want 401", r.Status, r.Raw)
	}
	if r := agent.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"w","ttlMs":30000}`); r.Status != 200 || r.Lease()["principal"] != "agent@example.com" {
		t.Fatalf("acquire = %d %s", r.Status, r.Raw)
	}
	if r := agent.Post(t, "/v1/leases/"+name+":revoke", `{"reason":"mine"}`); r.Status != 403 {
		t.Fatalf("revoke by the agent (no admin) = %d %s, want 403", r.Status, r.Raw)
	}
	oncall := e2e.Client{URL: svc.URL, Token: "oncall-token-012345678"}
	if r := oncall.Post(t, "/v1/leases/"+name+":revoke", `{"reason":"drill"}`); r.Status != 200 || r.Body["revokedBy"] != "oncall@example.com" {
		t.Fatalf("revoke by oncall = %d %s", r.Status, r.Raw)
	}
	if _, err := svc.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	var audits []string
	for l := range strings.SplitSeq(svc.Output(), "\n") {
		if strings.Contains(l, `"message":"audit"`) && strings.Contains(l, name) {
			audits = append(audits, l)
		}
	}
	want := []string{
		`"action":"acquire","outcome":"unauthenticated","principal":""`,
		`"action":"acquired","outcome":"ok"`,
		`"action":"revoke","outcome":"permission_denied","principal":"agent@example.com"`,
		`"action":"revoked","outcome":"ok"`,
	}
	if len(audits) != len(want) {
		t.Fatalf("%d audit lines for %s, want %d:\n%s", len(audits), name, len(want), strings.Join(audits, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(audits[i], w) || !strings.Contains(audits[i], `"leasesvc_log":"audit"`) {
			t.Errorf("audit line %d = %s, want %s", i, audits[i], w)
		}
	}
	if !strings.Contains(audits[3], `"principal":"oncall@example.com"`) || !strings.Contains(audits[3], `"reason":"drill"`) ||
		!strings.Contains(audits[3], `"holderPrincipal":"agent@example.com"`) {
		t.Errorf("revoked audit line %s, want operator, reason and the holder's principal", audits[3])
	}
	if strings.Contains(svc.Output(), `"message":"request"`) {
		t.Error("access-log lines at info level were written with LEASESVC_LOG_LEVEL=warn")
	}
	if strings.Contains(svc.Output(), "agent-token-0123456789") {
		t.Error("the log contains a token")
	}
}

func TestAccessConfigErrorsNameTheSetting(t *testing.T) {
	tokens := writeFile(t, "tokens.yaml", svcTokens)
	policy := writeFile(t, "policy.yaml", svcPolicy)
	badPolicy := writeFile(t, "bad.yaml", "grants:\n  - principals: [a@b.c]\n    verbs: [write]\n    prefixes: [x]\n")
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"LEASESVC_AUTH": "oauth"}, "LEASESVC_AUTH"},
		{map[string]string{"LEASESVC_POLICY": policy}, "LEASESVC_POLICY is set but LEASESVC_AUTH=none"},
		{map[string]string{"LEASESVC_AUTH": "static", "LEASESVC_POLICY": policy}, "LEASESVC_AUTH_TOKENS"},
		{map[string]string{"LEASESVC_AUTH": "static", "LEASESVC_AUTH_TOKENS": tokens}, "needs LEASESVC_POLICY"},
		{map[string]string{"LEASESVC_AUTH": "static", "LEASESVC_AUTH_TOKENS": "/nonexistent/tokens", "LEASESVC_POLICY": policy}, "LEASESVC_AUTH_TOKENS"},
		{map[string]string{"LEASESVC_AUTH": "static", "LEASESVC_AUTH_TOKENS": tokens, "LEASESVC_POLICY": badPolicy}, "bad.yaml:3:"},
		{map[string]string{"LEASESVC_RATE_LIMIT": "fast"}, "LEASESVC_RATE_LIMIT"},
		{map[string]string{"LEASESVC_RATE_LIMIT": "-1"}, "LEASESVC_RATE_LIMIT"},
		{map[string]string{"LEASESVC_RATE_LIMIT": "NaN"}, "LEASESVC_RATE_LIMIT"},
		{map[string]string{"LEASESVC_RATE_BURST": "0"}, "LEASESVC_RATE_BURST"},
		{map[string]string{"LEASESVC_ALLOWED_ORIGINS": "https://ok.example, tools.example.com"}, "LEASESVC_ALLOWED_ORIGINS"},
		{map[string]string{"LEASESVC_ALLOWED_HOSTS": "leasesvc:8080"}, "LEASESVC_ALLOWED_HOSTS"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			err := run(t.Context(), nil, func(k string) string { return tc.env[k] }, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestAccessDefaults(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	a, err := newAccess(t.Context(), func(string) string { return "" }, log)
	if err != nil || a.mode != "none" || a.authn != nil || a.policy != nil || a.limiter != nil || a.rate != 0 {
		t.Fatalf("default access = %+v, %v; want none, no policy, no limit", a, err)
	}
	if !strings.Contains(logs.String(), "authentication is off") {
		t.Fatalf("no warning that authentication is off: %s", logs.String())
	}
	env := map[string]string{"LEASESVC_AUTH": "static", "LEASESVC_AUTH_TOKENS": writeFile(t, "t.yaml", svcTokens), "LEASESVC_POLICY": writeFile(t, "p.yaml", svcPolicy)}
	a, err = newAccess(t.Context(), func(k string) string { return env[k] }, log)
	if err != nil || a.authn == nil || a.policy == nil || a.limiter == nil || a.rate != defaultRateLimit || a.burst != 2*defaultRateLimit {
		t.Fatalf("static access = %+v, %v; want tokens, policy, %d/s burst %d", a, err, defaultRateLimit, 2*defaultRateLimit)
	}
	env["LEASESVC_RATE_LIMIT"], env["LEASESVC_RATE_BURST"] = "0", "5"
	if a, err = newAccess(t.Context(), func(k string) string { return env[k] }, log); err != nil || a.limiter != nil {
		t.Fatalf("LEASESVC_RATE_LIMIT=0 gives %+v, %v; want no limiter", a, err)
	}
	env["LEASESVC_ALLOWED_HOSTS"], env["LEASESVC_ALLOWED_ORIGINS"] = " leasesvc.internal, ,10.0.0.5,* ", "https://tools.example.com"
	if a, err = newAccess(t.Context(), func(k string) string { return env[k] }, log); err != nil ||
		strings.Join(a.hosts, " ") != "leasesvc.internal 10.0.0.5 *" || strings.Join(a.origins, " ") != "https://tools.example.com" {
		t.Fatalf("allowed hosts and origins = %q %q, %v; want the listed ones", a.hosts, a.origins, err)
	}
}
