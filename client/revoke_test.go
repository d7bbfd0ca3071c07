package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/internal/fakeclock"
)

// TestRevoke: the request (route, body, credentials), the answer decoded,
// and each refusal mapped to its sentinel.
func TestRevoke(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeLeases(t, clock.Now)
	agent, _ := client.New(f.URL, client.Config{TokenSource: client.StaticToken("agent-a")})
	admin, _ := client.New(f.URL, client.Config{TokenSource: client.StaticToken("admin-token")})
	ctx := t.Context()

	if _, err := admin.Revoke(ctx, "jobs.a", client.RevokeRequest{Reason: "stuck"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("revoke of a lease that never existed: %v, want ErrNotFound", err)
	}
	a, err := agent.Acquire(ctx, "jobs.a", client.AcquireRequest{Holder: "agent-a", TTL: time.Minute})
	if err != nil || a.Principal != "agent-a" || a.RevokedBy != "" {
		t.Fatalf("acquire = %+v, %v; want principal agent-a", a, err)
	}
	if _, err := agent.Revoke(ctx, "jobs.a", client.RevokeRequest{Reason: "mine now"}); !errors.Is(err, client.ErrPermissionDenied) || !errors.Is(err, client.ErrDenied) {
		t.Fatalf("revoke without the admin verb: %v, want ErrPermissionDenied", err)
	}
	if _, err := admin.Revoke(ctx, "jobs.a", client.RevokeRequest{Reason: "stuck", FencingToken: 2}); !errors.Is(err, client.ErrLost) {
		t.Fatalf("revoke of a token that is not the live holding: %v, want ErrLost", err)
	}
	_, err = admin.Revoke(ctx, "jobs.a", client.RevokeRequest{})
	var e *client.Error
	if !errors.Is(err, client.ErrInvalid) || !errors.As(err, &e) || len(e.Fields) != 1 || e.Fields[0].Field != "reason" {
		t.Fatalf("revoke without a reason: %v, want ErrInvalid naming reason", err)
	}
	if l, err := agent.Get(ctx, "jobs.a"); err != nil || !l.Held || l.FencingToken != 1 {
		t.Fatalf("refused revokes changed the lease: %+v, %v", l, err)
	}

	clock.Advance(time.Second)
	r, err := admin.Revoke(ctx, "jobs.a", client.RevokeRequest{Reason: "stuck on a bad disk", FencingToken: 1})
	if err != nil || r.Held || r.FencingToken != 1 || r.Holder != "agent-a" || r.RevokedBy != "admin@example" ||
		r.RevokeReason != "stuck on a bad disk" || r.Principal != "agent-a" || r.Remaining != 0 || !r.ExpireTime.Equal(epoch.Add(time.Second)) {
		t.Fatalf("revoke = %+v, %v", r, err)
	}
	last := f.requests("revoke")
	req := last[len(last)-1]
	if req.Name != "jobs.a" || req.Auth != "Bearer admin-token" || len(req.Body) != 2 ||
		req.Body["reason"] != "stuck on a bad disk" || req.Body["fencingToken"] != 1.0 {
		t.Fatalf("revoke sent %+v", req)
	}
	// Not held any more: nothing to revoke, the lease comes back unchanged;
	// with no fencing token the body has none.
	again, err := admin.Revoke(ctx, "jobs.a", client.RevokeRequest{Reason: "again"})
	if err != nil || again.Held || again.RevokeReason != "stuck on a bad disk" {
		t.Fatalf("revoke of a lease not held: %+v, %v; want it unchanged", again, err)
	}
	if last = f.requests("revoke"); len(last[len(last)-1].Body) != 1 {
		t.Fatalf("revoke without a token sent %v", last[len(last)-1].Body)
	}
	// The holder has lost it; the next acquire gets token + 1.
	if _, err := agent.Renew(ctx, "jobs.a", client.RenewRequest{Holder: "agent-a", FencingToken: 1}); !errors.Is(err, client.ErrLost) {
		t.Fatalf("renew after the revoke: %v, want ErrLost", err)
	}
	if b, err := agent.Acquire(ctx, "jobs.a", client.AcquireRequest{Holder: "agent-a", TTL: time.Minute}); err != nil || b.FencingToken != 2 || b.RevokedBy != "" {
		t.Fatalf("acquire after the revoke = %+v, %v; want token 2", b, err)
	}
	// No credentials at all.
	anon, _ := client.New(f.URL, client.Config{})
	if _, err := anon.Revoke(ctx, "jobs.a", client.RevokeRequest{Reason: "x"}); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("revoke without credentials: %v, want ErrUnauthenticated", err)
	}
}

// TestRevokeRetries: a revoke is retried only when the service did not act
// on it (429); a 502, 503 or 504 might have come after the revoke took
// effect, and is returned at once.
func TestRevokeRetries(t *testing.T) {
	var calls atomic.Int32
	var status atomic.Int32
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			problem(w, int(status.Load()), map[int32]string{429: "resource_exhausted", 502: "", 503: "unavailable", 504: "deadline_exceeded"}[status.Load()], nil)
			return
		}
		okLease(w, r)
	})
	c, _ := client.New(srv.URL, client.Config{MaxAttempts: 3, Backoff: client.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	for _, tc := range []struct {
		status int
		calls  int32
	}{{429, 2}, {502, 1}, {503, 1}, {504, 1}} {
		calls.Store(0)
		status.Store(int32(tc.status))
		_, err := c.Revoke(t.Context(), "jobs", client.RevokeRequest{Reason: "r"})
		if calls.Load() != tc.calls || (tc.calls == 1) != errors.Is(err, client.ErrUnavailable) {
			t.Errorf("revoke answered %d first: %v after %d calls, want %d", tc.status, err, calls.Load(), tc.calls)
		}
		// The same answer to a Get is retried.
		calls.Store(0)
		if _, err := c.Get(t.Context(), "jobs"); err != nil || calls.Load() != 2 {
			t.Errorf("get answered %d first: %v after %d calls, want 2", tc.status, err, calls.Load())
		}
	}
	// A connection that cannot be made: nothing was sent, so it is retried.
	var dials atomic.Int32
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	dead, _ := client.New("http://"+closedPort(t), client.Config{HTTPClient: &http.Client{Transport: tr}, MaxAttempts: 3,
		Backoff: client.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	if _, err := dead.Revoke(t.Context(), "jobs", client.RevokeRequest{Reason: "r"}); !errors.Is(err, client.ErrUnavailable) || dials.Load() != 3 {
		t.Fatalf("revoke with the service down: %v after %d dials, want ErrUnavailable after 3", err, dials.Load())
	}
}

// TestRevokedFieldsDecoded: the lease's principal and revocation, and a
// revoked event's reason and operator, from JSON, from a watch stream, and
// back.
func TestRevokedFieldsDecoded(t *testing.T) {
	const lease = `{"name":"jobs","holder":"agent-a","fencingToken":4,"ttlMs":30000,"acquireTime":"2026-11-21T18:00:00Z",` +
		`"renewTime":"2026-11-21T18:00:10Z","expireTime":"2026-11-21T18:00:12Z","held":false,"remainingMs":0,` +
		`"serverTime":"2026-11-21T18:00:12Z","transitions":4,"metadata":{},"principal":"agent-a@p.iam.gserviceaccount.com",` +
		`"revokedBy":"ops@example.com","revokeReason":"stuck on a bad disk"}`
	var l client.Lease
	if err := json.Unmarshal([]byte(lease), &l); err != nil {
		t.Fatal(err)
	}
	if l.Principal != "agent-a@p.iam.gserviceaccount.com" || l.RevokedBy != "ops@example.com" || l.RevokeReason != "stuck on a bad disk" {
		t.Fatalf("decoded %+v", l)
	}
	b, err := json.Marshal(l)
	if err != nil || !strings.Contains(string(b), `"principal":"agent-a@p.iam.gserviceaccount.com"`) ||
		!strings.Contains(string(b), `"revokedBy":"ops@example.com"`) || !strings.Contains(string(b), `"revokeReason":"stuck on a bad disk"`) {
		t.Fatalf("encoded %s, %v", b, err)
	}
	// Without authentication and revocation the members are absent.
	if b, _ := json.Marshal(client.Lease{Name: "x"}); strings.Contains(string(b), "principal") || strings.Contains(string(b), "revoke") {
		t.Fatalf("a lease without them encodes %s", b)
	}

	data := `{"type":"revoked","lease":` + lease + `,"reason":"stuck on a bad disk","operator":"ops@example.com","eventTime":"2026-11-21T18:00:12Z"}`
	ev, err := client.ParseEvent([]byte(data))
	if err != nil || ev.Type != client.EventRevoked || ev.Reason != "stuck on a bad disk" || ev.Operator != "ops@example.com" ||
		ev.Lease.RevokedBy != "ops@example.com" || ev.ID() != "jobs/4/revoked" || !ev.Time.Equal(time.Date(2026, 11, 21, 18, 0, 12, 0, time.UTC)) {
		t.Fatalf("ParseEvent = %+v, %v", ev, err)
	}
	acquired := client.Event{Type: client.EventAcquired, Lease: client.Lease{Name: "jobs", FencingToken: 4}}
	if !client.Newer(acquired, ev) || client.Newer(ev, acquired) {
		t.Fatal("revoked must order after the acquired of its token")
	}
	if next := (client.Event{Type: client.EventAcquired, Lease: client.Lease{Name: "jobs", FencingToken: 5}}); !client.Newer(ev, next) {
		t.Fatal("the next holding must order after a revoked")
	}

	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("event: lease\ndata: " + strings.Replace(lease, `"held":false`, `"held":true`, 1) + "\n\n" +
			": heartbeat\n\nevent: revoked\ndata: " + data + "\n\n"))
		<-time.After(50 * time.Millisecond)
	})
	c, _ := client.New(srv.URL, client.Config{})
	st, err := c.Watch(t.Context(), "jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	if first, err := st.Next(); err != nil || first.Type != client.EventState || !first.Lease.Held {
		t.Fatalf("first event %+v, %v", first, err)
	}
	got, err := st.Next()
	if err != nil || got.Type != client.EventRevoked || got.Reason != ev.Reason || got.Operator != ev.Operator || got.Lease.Held {
		t.Fatalf("watched %+v, %v; want the revoked event", got, err)
	}
	out, _ := json.Marshal(got)
	if !strings.Contains(string(out), `"type":"revoked"`) || !strings.Contains(string(out), `"operator":"ops@example.com"`) ||
		!strings.Contains(string(out), `"reason":"stuck on a bad disk"`) {
		t.Fatalf("the event encodes as %s", out)
	}
}

// TestElectorStopsAtOnceWhenRevoked: after an operator revokes the holding,
// the service answers the leader's next renew with lease_lost and says
// nothing else; the leading ctx is cancelled at that answer, long before
// the safe deadline, the revoked holding is not released, and the Elector
// campaigns again and leads with token + 1.
func TestElectorStopsAtOnceWhenRevoked(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeLeases(t, clock.Now)
	c, _ := client.New(f.URL, client.Config{MaxAttempts: 1, TokenSource: client.StaticToken("agent-a")})
	admin, _ := client.New(f.URL, client.Config{TokenSource: client.StaticToken("admin-token")})
	var rec term
	e, err := keeperElector(t, c, "svc.revoked", client.KeeperConfig{Clock: clock}, rec.config(clock, "agent-a"))
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, e)
	waitFor(t, "leading", func() bool { n, _, _ := rec.get(); return n == 1 })
	_, _, ctx := rec.get()
	waitFor(t, "timers armed", func() bool { return clock.Timers() == 2 })

	clock.Advance(3 * time.Second)
	if _, err := admin.Revoke(t.Context(), "svc.revoked", client.RevokeRequest{Reason: "maintenance", FencingToken: 1}); err != nil {
		t.Fatal(err)
	}
	// The Elector hears of it only from its next renew.
	if ctx.Err() != nil || !e.IsLeader() {
		t.Fatalf("cancelled before any renew: %v", context.Cause(ctx))
	}
	start := time.Now()
	clock.Advance(7 * time.Second) // the renew is due by +10s (TTL/3 minus jitter)
	waitFor(t, "the leading ctx cancelled", func() bool { return ctx.Err() != nil })
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancelled %v (real time) after the lease_lost", d)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, client.ErrLost) {
		t.Fatalf("cause %v, want ErrLost", cause)
	}
	if at := rec.cancelledAt(t); at.After(epoch.Add(10 * time.Second)) {
		t.Fatalf("cancelled at +%v, want at the renew (+10s at most), not the safe deadline (+27s)", at.Sub(epoch))
	}
	waitFor(t, "OnStoppedLeading", func() bool { _, n, _ := rec.get(); return n == 1 })
	waitFor(t, "leading again", func() bool { n, _, _ := rec.get(); return n == 2 })
	if tok, ok := e.Token(); !ok || tok != 2 {
		t.Fatalf("second term's token %d, %v; want 2", tok, ok)
	}
	rec.mu.Lock()
	second := rec.token
	rec.mu.Unlock()
	if second != 2 {
		t.Fatalf("TokenFromContext of the second term = %d, want 2", second)
	}
	for _, r := range f.requests("release") {
		t.Fatalf("released after the revoke: %+v", r)
	}
	if renews := f.requests("renew"); len(renews) != 1 {
		t.Fatalf("%d renews, want the one that answered lease_lost", len(renews))
	}
	for _, r := range f.requests("") {
		if r.Auth != "Bearer agent-a" && r.Auth != "Bearer admin-token" {
			t.Fatalf("request %s sent Authorization %q", r.Op, r.Auth)
		}
	}
}
