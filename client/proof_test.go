package client_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/session"
)

// serviceVerifier returns a fence verifier of the service's proofs, from
// its JWKS.
func serviceVerifier(t *testing.T, base string) *fence.Verifier {
	t.Helper()
	resp, err := http.Get(base + "/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := fence.ParseJWKS(raw)
	if err != nil || len(keys) == 0 {
		t.Fatalf("JWKS %s: %d keys, %v", raw, len(keys), err)
	}
	v, err := fence.NewVerifier(keys, "leasesvc")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLeaseProof: an acquire's answer, over REST and through a session,
// carries the holding's proof, which verifies for that lease, token and
// holder; a Get's answer carries none; printing or logging the Lease
// shows "[proof]", never the proof.
func TestLeaseProof(t *testing.T) {
	srv, _ := newTestService(t, testService{sessions: &session.Config{}, proofs: true})
	v := serviceVerifier(t, srv.URL)
	c, err := client.New(srv.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s, err := c.OpenSession(ctx, client.SessionConfig{Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	rest, err := c.Acquire(ctx, "proof.rest", client.AcquireRequest{Holder: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.Acquire(ctx, "proof.session", client.AcquireRequest{Holder: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []client.Lease{rest, sess} {
		if l.Proof == "" {
			t.Fatalf("%s: acquire answered no proof", l.Name)
		}
		cl, err := v.Verify(ctx, string(l.Proof))
		if err != nil || cl.Lease != l.Name || cl.FencingToken != l.FencingToken || cl.Holder != l.Holder {
			t.Errorf("%s: proof verifies as %+v, %v; want lease %s token %d holder %s", l.Name, cl, err, l.Name, l.FencingToken, l.Holder)
		}
		var logged bytes.Buffer
		slog.New(slog.NewTextHandler(&logged, nil)).Info("held", "lease", l, "proof", l.Proof)
		slog.New(slog.NewJSONHandler(&logged, nil)).Info("held", "proof", l.Proof)
		printed := fmt.Sprintf("%v %+v %#v %s", l, l, l, l.Proof) + logged.String()
		if strings.Contains(printed, string(l.Proof)) || !strings.Contains(printed, "[proof]") {
			t.Errorf("%s: printed and logged %q; want [proof], never the proof", l.Name, printed)
		}
	}
	if got, err := c.Get(ctx, "proof.rest"); err != nil || got.Proof != "" {
		t.Errorf("get: proof %q, %v; want none (only the holder's acquire carries it)", got.Proof, err)
	}
}
