package emulatortests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// Credentials of the revoke test: an agent that may acquire, an operator
// with admin.
const (
	revokeAgentToken = "agent-token-0123456789"
	revokeOpsToken   = "oncall-token-012345678"
	revokeTokens     = "tokens:\n  - {principal: agent@example.com, token: " + revokeAgentToken + "}\n" +
		"  - {principal: oncall@example.com, token: " + revokeOpsToken + "}\n"
	revokePolicy = "grants:\n  - principals: [agent@example.com]\n    verbs: [acquire]\n    prefixes: [\"*\"]\n" +
		"  - principals: [oncall@example.com]\n    verbs: [admin]\n    prefixes: [\"*\"]\n"
)

// TestRevokeEndToEnd: with authentication on, on Firestore with events on
// Pub/Sub, an SDK Elector leads; an operator revokes its holding with the
// SDK; the revoked event with reason and operator reaches a Pub/Sub
// subscriber; the Elector stops leading at its next renew, long before its
// safe deadline; it campaigns again and leads with the next token.
func TestRevokeEndToEnd(t *testing.T) {
	t.Parallel()
	topic, psClient := eventsTopic(t)
	sub := subscribe(t, psClient, topic)
	dir := t.TempDir()
	tokens, policy := filepath.Join(dir, "tokens.yaml"), filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(tokens, []byte(revokeTokens), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policy, []byte(revokePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	env := eventsEnv(t, uniqueCollection("revoke"), topic)
	env["LEASESVC_AUTH"], env["LEASESVC_AUTH_TOKENS"], env["LEASESVC_POLICY"] = "static", tokens, policy
	svc := e2e.StartService(t, env)

	agent, err := client.New(svc.URL, client.Config{TokenSource: client.StaticToken(revokeAgentToken)})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := client.New(svc.URL, client.Config{TokenSource: client.StaticToken(revokeOpsToken)})
	if err != nil {
		t.Fatal(err)
	}
	name := e2e.UniqueName("revoke")
	const ttl = 6 * time.Second // renew every 2 s; safe deadline 5.4 s after a renew is sent
	type term struct {
		token         int64
		start, end    time.Time
		endedByCancel bool
	}
	var (
		mu    sync.Mutex
		terms []term
	)
	started := make(chan int64, 4)
	el, err := agent.NewElector(name, client.ElectorConfig{
		Holder: "worker-1",
		Callbacks: client.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				tok, _ := client.TokenFromContext(ctx)
				mu.Lock()
				terms = append(terms, term{token: tok, start: time.Now()})
				mu.Unlock()
				started <- tok
				<-ctx.Done()
				mu.Lock()
				terms[len(terms)-1].end, terms[len(terms)-1].endedByCancel = time.Now(), true
				mu.Unlock()
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	select {
	case tok := <-started:
		if tok != 1 {
			t.Fatalf("first term token %d, want 1", tok)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the Elector did not lead within 20 s")
	}

	// The term runs (OnStartedLeading was called): revoke it now.
	revokedAt := time.Now()
	l, err := ops.Revoke(t.Context(), name, client.RevokeRequest{Reason: "drill: hand over", FencingToken: 1})
	if err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if l.Held || l.RevokedBy != "oncall@example.com" || l.RevokeReason != "drill: hand over" || l.Principal != "agent@example.com" {
		t.Fatalf("Revoke = %+v, want not held, revoked by oncall with the reason, holding of agent@example.com", l)
	}

	select {
	case tok := <-started:
		if tok != 2 {
			t.Fatalf("term after the revoke has token %d, want 2", tok)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the Elector did not lead again within 15 s of the revoke")
	}
	mu.Lock()
	first := terms[0]
	mu.Unlock()
	stoppedAfter := first.end.Sub(revokedAt)
	if !first.endedByCancel || stoppedAfter > ttl/3+time.Second {
		t.Fatalf("the revoked term ended %v after the revoke (by cancel: %t), want at its next renew, within TTL/3 + 1 s = %v",
			stoppedAfter, first.endedByCancel, ttl/3+time.Second)
	}
	t.Logf("revoked term stopped %v after the revoke (safe deadline would have been up to %v)", stoppedAfter, ttl*9/10)

	want := []string{name + "/1/acquired", name + "/1/revoked", name + "/2/acquired"}
	eventually(t, 15*time.Second, func() error {
		if got := sub.ids(name); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("events %v, want %v", got, want)
		}
		return nil
	})
	for _, m := range sub.of(name) {
		switch m.attrs["ce-id"] {
		case name + "/1/revoked":
			lj, _ := m.data["lease"].(map[string]any)
			if m.attrs["ce-type"] != "dev.leasesvc.lease.revoked.v1" || m.data["reason"] != "drill: hand over" ||
				m.data["operator"] != "oncall@example.com" || lj["held"] != false || lj["principal"] != "agent@example.com" {
				t.Errorf("revoked message %v %v, want ce-type revoked, reason, operator, lease not held", m.attrs, m.data)
			}
		case name + "/2/acquired":
			if m.data["previousHolder"] != "worker-1" || m.data["previousExpired"] != false {
				t.Errorf("acquired after revoke %v, want previous holder worker-1, not expired", m.data)
			}
		}
	}
}

// TestSpannerServiceWithAuth drives the real binary over the Spanner
// emulator with authentication on through the whole contract flow as an
// allowed principal (docs/contract.md §3 unchanged for allowed callers), then checks
// holder binding and revocation as Spanner stores them.
func TestSpannerServiceWithAuth(t *testing.T) {
	db, _ := spannerSetup(t)
	dir := t.TempDir()
	tokens, policy := filepath.Join(dir, "tokens.yaml"), filepath.Join(dir, "policy.yaml")
	extraTokens := revokeTokens + "  - {principal: other@example.com, token: other-token-0123456789}\n"
	extraPolicy := revokePolicy + "  - principals: [other@example.com]\n    verbs: [acquire]\n    prefixes: [\"*\"]\n"
	if err := os.WriteFile(tokens, []byte(extraTokens), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policy, []byte(extraPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := e2e.StartService(t, spannerServiceEnv(db, "LEASESVC_AUTH", "static", "LEASESVC_AUTH_TOKENS", tokens, "LEASESVC_POLICY", policy))
	agent := e2e.Client{URL: svc.URL, Token: revokeAgentToken}
	e2e.FlowsWith(t, agent)

	p := "/v1/leases/" + e2e.UniqueName("bind")
	mustStatus(t, "acquire by agent", agent.Post(t, p+":acquire", `{"holder":"w","ttlMs":30000}`), 200)
	other := e2e.Client{URL: svc.URL, Token: "other-token-0123456789"}
	if r := other.Post(t, p+":renew", `{"holder":"w","fencingToken":1}`); r.Status != 409 || r.Code() != "lease_lost" {
		t.Fatalf("renew by another principal = %d %s, want lease_lost", r.Status, r.Raw)
	}
	ops := e2e.Client{URL: svc.URL, Token: revokeOpsToken}
	r := mustStatus(t, "revoke", ops.Post(t, p+":revoke", `{"reason":"spanner drill"}`), 200)
	if r.Body["revokedBy"] != "oncall@example.com" || r.Body["principal"] != "agent@example.com" {
		t.Fatalf("revoke = %s", r.Raw)
	}
	if g := agent.Get(t, p); g.Body["revokeReason"] != "spanner drill" || g.Body["held"] != false {
		t.Fatalf("get after revoke = %s, want the stored revocation", g.Raw)
	}
	if r := other.Post(t, p+":acquire", `{"holder":"w","ttlMs":30000}`); r.Status != 200 || r.Token() != 2 || r.Lease()["principal"] != "other@example.com" || r.Body["revokeReason"] != nil {
		t.Fatalf("acquire after revoke = %d %s, want token 2 for other@example.com, revocation cleared", r.Status, r.Raw)
	}
	stopCleanly(t, svc)
}
