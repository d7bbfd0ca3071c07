package client_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/internal/fakeclock"
	"github.com/leasesvc/leasesvc/session"
)

// checkLedProof fails t unless the leading ctx carries a proof that the
// service signed for lease name, the term's token and holder.
func checkLedProof(t *testing.T, srvURL string, ctx context.Context, name, holder string) {
	t.Helper()
	if p, ok := client.ProofFromContext(t.Context()); ok {
		t.Fatalf("a ctx that is no leading ctx carries proof %v", p)
	}
	token, ok := client.TokenFromContext(ctx)
	if !ok {
		t.Fatal("the leading ctx carries no token")
	}
	p, ok := client.ProofFromContext(ctx)
	if !ok || p == "" {
		t.Fatalf("the leading ctx carries no proof (%q, %v)", p, ok)
	}
	cl, err := serviceVerifier(t, srvURL).Verify(t.Context(), string(p))
	if err != nil || cl.Lease != name || cl.FencingToken != token || cl.Holder != holder {
		t.Fatalf("the led proof verifies as %+v, %v; want lease %s token %d holder %s", cl, err, name, token, holder)
	}
}

// TestElectorLeadsWithProof: through a session, the leading ctx carries
// the proof of the acquire that began the term (ProofFromContext), one the
// service signed for that lease, token and holder.
func TestElectorLeadsWithProof(t *testing.T) {
	srv, _ := newTestService(t, testService{sessions: &session.Config{}, proofs: true})
	c, err := client.New(srv.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := leadWith(t, c, "proof.elector", client.KeeperConfig{}, client.ElectorConfig{Holder: "agent-a"}, &strings.Builder{})
	checkLedProof(t, srv.URL, ctx, "proof.elector", "agent-a")
	if err := stop(); err != nil {
		t.Errorf("Run = %v", err)
	}
}

// TestElectorProofAfterWaitingAcquire: with plain renewals, a follower
// whose waiting acquire took long confirms the holding with a renew (whose
// answer carries no proof) before it leads; its leading ctx still carries
// the acquire's proof. The waiting time is on the Elector's fake clock,
// moved while the acquire waits on the service.
func TestElectorProofAfterWaitingAcquire(t *testing.T) {
	const name = "proof.waited"
	waiting := make(chan struct{}, 1)
	srv, _ := newTestService(t, testService{proofs: true, wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, ":acquire") {
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				if bytes.Contains(body, []byte(`"waitMs"`)) {
					select {
					case waiting <- struct{}{}:
					default:
					}
				}
			}
			h.ServeHTTP(w, r)
		})
	}})
	c, err := client.New(srv.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	held, err := c.Acquire(t.Context(), name, client.AcquireRequest{Holder: "agent-a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	clock := fakeclock.New(time.Now())
	const ttl = time.Minute
	leading := make(chan context.Context, 1)
	e, err := keeperElector(t, c, name, client.KeeperConfig{TTL: ttl, Clock: clock, PlainRenewals: true}, client.ElectorConfig{
		Holder: "agent-b", Wait: 30 * time.Second,
		Callbacks: client.LeaderCallbacks{OnStartedLeading: func(ctx context.Context) { leading <- ctx; <-ctx.Done() }},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := runElector(t, e)
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("no waiting acquire reached the service in 10s")
	}
	// The wait takes longer than half a RenewInterval (TTL/3): the Elector
	// renews before it leads.
	clock.Advance(ttl / 3)
	if _, err := c.Release(t.Context(), name, "agent-a", held.FencingToken); err != nil {
		t.Fatal(err)
	}
	var ctx context.Context
	select {
	case ctx = <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("agent-b not leading 10s after the release")
	}
	checkLedProof(t, srv.URL, ctx, name, "agent-b")
	if tok, _ := client.TokenFromContext(ctx); tok != held.FencingToken+1 {
		t.Errorf("agent-b leads with token %d, want %d", tok, held.FencingToken+1)
	}
	if err := stop(); err != nil {
		t.Errorf("Run = %v", err)
	}
}
