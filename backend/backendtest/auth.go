package backendtest

import (
	"errors"
	"testing"

	"github.com/leasesvc/leasesvc/lease"
)

// testPrincipalBinding checks holder binding: a holding belongs to the
// principal that acquired it, and another principal using the same holder
// name and token is refused as a stranger is, changing nothing.
func testPrincipalBinding(t *testing.T, e *env) {
	m := e.manager(t, nil)
	name := e.name("bind")
	a, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "a", TTL: live, Principal: "alice@example.com"})
	if err != nil || a.Principal != "alice@example.com" || a.FencingToken != 1 {
		t.Fatalf("Acquire by alice = %+v, %v; want token 1 bound to alice", a, err)
	}
	before := get(t, m, name)
	if before.Principal != "alice@example.com" {
		t.Fatalf("Get shows principal %q, want alice@example.com (stored)", before.Principal)
	}
	var held *lease.HeldError
	if _, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "a", TTL: live, Principal: "bob@example.com"}); !errors.As(err, &held) {
		t.Errorf("Acquire by bob as holder a = %v, want lease_held (the holding is alice's)", err)
	}
	if _, err := m.Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "a", FencingToken: 1, Principal: "bob@example.com"}); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Renew by bob = %v, want ErrLost", err)
	}
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: 1, Principal: "bob@example.com"}); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Release by bob = %v, want ErrLost", err)
	}
	if _, err := m.Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "a", FencingToken: 1}); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Renew without a principal = %v, want ErrLost", err)
	}
	if after := get(t, m, name); !sameState(before, after) {
		t.Fatalf("refused requests of another principal changed %+v into %+v", before, after)
	}
	if r, err := m.Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "a", FencingToken: 1, Principal: "alice@example.com"}); err != nil || r.Principal != "alice@example.com" {
		t.Fatalf("Renew by alice = %+v, %v", r, err)
	}
	if r, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "a", TTL: live, Principal: "alice@example.com"}); err != nil || r.FencingToken != 1 {
		t.Fatalf("repeat Acquire by alice = %+v, %v; want the same holding", r, err)
	}
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: 1, Principal: "alice@example.com"}); err != nil {
		t.Fatalf("Release by alice: %v", err)
	}
	b, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "a", TTL: live, Principal: "bob@example.com"})
	if err != nil || b.FencingToken != 2 || b.Principal != "bob@example.com" {
		t.Fatalf("Acquire by bob after the release = %+v, %v; want token 2 bound to bob", b, err)
	}
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: 2, Principal: "alice@example.com"}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Release of bob's holding by alice = %v, want ErrLost", err)
	}
}

// testRevoke checks operator revocation: it ends the live holding at the
// decision time, records the operator and reason, publishes one revoked
// event, makes the holder's renew and release lost, and the next acquire
// gets the next token with the revocation cleared.
func testRevoke(t *testing.T, e *env) {
	rec := &recorder{}
	m := e.manager(t, rec.add)
	name := e.name("revoke")
	if _, err := m.Revoke(t.Context(), lease.RevokeRequest{Name: name, Reason: "r"}); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Revoke of a lease that never existed = %v, want ErrNotFound", err)
	}
	if _, err := m.Revoke(t.Context(), lease.RevokeRequest{Name: name}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("Revoke without a reason = %v, want ErrInvalid", err)
	}
	a, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "a", TTL: live, Principal: "agent@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	rec.take()
	r, err := m.Revoke(t.Context(), lease.RevokeRequest{Name: name, Reason: "stuck leader", Operator: "oncall@example.com"})
	switch {
	case err != nil:
		t.Fatalf("Revoke: %v", err)
	case r.Held(), !r.ExpireTime.Equal(r.ServerTime), r.FencingToken != 1, r.Holder != "a", r.Principal != "agent@example.com":
		t.Fatalf("Revoke = %+v, want holding 1 of a ended at serverTime", r)
	case r.RevokedBy != "oncall@example.com" || r.RevokeReason != "stuck leader" || !r.Revoked():
		t.Fatalf("Revoke = %+v, want revokedBy oncall, reason kept", r)
	case r.ServerTime.Before(a.ServerTime):
		t.Fatalf("Revoke serverTime %v before the acquire's %v", r.ServerTime, a.ServerTime)
	}
	evs := rec.take()
	if len(evs) != 1 || evs[0].Type != lease.EventRevoked || evs[0].Reason != "stuck leader" || evs[0].Operator != "oncall@example.com" ||
		!evs[0].Time.Equal(r.ServerTime) || evs[0].Lease.FencingToken != 1 {
		t.Fatalf("events after Revoke = %+v, want one revoked event with reason, operator, time = serverTime", evs)
	}
	if got := get(t, m, name); !sameState(got, r) {
		t.Fatalf("Get after Revoke = %+v, want the revoked state %+v", got, r)
	}
	if _, err := m.Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "a", FencingToken: 1, Principal: "agent@example.com"}); !errors.Is(err, lease.ErrLost) {
		t.Errorf("holder's Renew after Revoke = %v, want ErrLost", err)
	}
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: 1, Principal: "agent@example.com"}); !errors.Is(err, lease.ErrLost) {
		t.Errorf("holder's Release after Revoke = %v, want ErrLost (revoked, not released)", err)
	}
	again, err := m.Revoke(t.Context(), lease.RevokeRequest{Name: name, Reason: "again", Operator: "x"})
	if err != nil || !sameState(again, r) {
		t.Fatalf("Revoke of a lease not held = %+v, %v; want it unchanged", again, err)
	}
	if _, err := m.Revoke(t.Context(), lease.RevokeRequest{Name: name, Reason: "r", FencingToken: 1}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Revoke naming an ended holding = %v, want ErrLost", err)
	}
	if evs := rec.take(); len(evs) != 0 {
		t.Fatalf("events after revokes that changed nothing: %+v", evs)
	}
	b, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "b", TTL: live})
	if err != nil || b.FencingToken != 2 || b.Revoked() || b.RevokedBy != "" || b.Principal != "" || b.Transitions != 2 {
		t.Fatalf("Acquire after Revoke = %+v, %v; want token 2 without revocation or principal", b, err)
	}
	evs = rec.take()
	if len(evs) != 1 || evs[0].PreviousHolder != "a" || evs[0].PreviousExpired {
		t.Fatalf("acquired event after Revoke = %+v, want previous holder a, not expired", evs)
	}
	if _, err := m.Revoke(t.Context(), lease.RevokeRequest{Name: name, Reason: "r", FencingToken: 1}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Revoke naming the previous holding = %v, want ErrLost", err)
	}
	if l := get(t, m, name); !l.Held() || l.FencingToken != 2 {
		t.Fatalf("a refused Revoke changed the lease: %+v", l)
	}
	if r, err := m.Revoke(t.Context(), lease.RevokeRequest{Name: name, Reason: "r", FencingToken: 2}); err != nil || r.Held() || r.RevokedBy != "" {
		t.Fatalf("Revoke naming the current holding = %+v, %v; want it ended, no operator", r, err)
	}
}
