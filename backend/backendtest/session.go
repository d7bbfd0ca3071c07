package backendtest

import (
	"errors"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// sessionRef is the session of sampleSessionKey at epoch.
func sessionRef(epoch int64) *lease.SessionRef {
	return &lease.SessionRef{Key: sampleSessionKey, Epoch: epoch, Window: 1500 * time.Millisecond}
}

// testSessionLifecycle runs a session-held holding through two instances
// (docs/contract.md §14): its session round-trips through the backend; a
// takeover by the second instance fences off the first one's renewals and
// expiry; the death of the session releases it with reason
// session_expired; a resume restarts it with the same token; a plain
// renew is refused and a plain release ends it for good.
func testSessionLifecycle(t *testing.T, e *env) {
	ctx := t.Context()
	var rec recorder
	ms := e.instances(t, 2, rec.add)
	old, cur := ms[0], ms[1]
	name := e.name("session")
	const ttl = 2 * time.Hour // the session lease TTL: beyond the Manager's MaxTTL
	l, err := old.Acquire(ctx, lease.AcquireRequest{Name: name, Holder: "agent", TTL: ttl, Session: sessionRef(1)})
	if err != nil {
		t.Fatalf("acquire through a session: %v", err)
	}
	got, err := cur.Get(ctx, name)
	if err != nil || !got.Session || got.SessionKey != sampleSessionKey || got.SessionEpoch != 1 || got.SessionWindow != 1500*time.Millisecond || got.TTL != ttl {
		t.Fatalf("Get of a session-held holding = %+v, %v; want its session, epoch 1, window 1.5s, TTL %v", got, err, ttl)
	}

	// The second instance takes the session over; the first is fenced off.
	if got, err = cur.TakeOver(ctx, lease.TakeOverRequest{Name: name, Holder: "agent", FencingToken: l.FencingToken, TTL: ttl, Session: *sessionRef(2)}); err != nil || got.SessionEpoch != 2 {
		t.Fatalf("TakeOver to epoch 2 = %+v, %v", got, err)
	}
	if _, err := old.TakeOver(ctx, lease.TakeOverRequest{Name: name, Holder: "agent", FencingToken: l.FencingToken, TTL: ttl, Session: *sessionRef(2)}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("a second TakeOver to epoch 2 = %v; want ErrLost", err)
	}
	if _, err := old.Renew(ctx, lease.RenewRequest{Name: name, Holder: "agent", FencingToken: l.FencingToken, Session: sessionRef(1)}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("renew at the old epoch = %v; want ErrLost", err)
	}
	if _, err := old.ExpireSession(ctx, lease.ReleaseRequest{Name: name, Holder: "agent", FencingToken: l.FencingToken, Session: sessionRef(1)}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("ExpireSession at the old epoch = %v; want ErrLost", err)
	}
	if _, err := cur.Renew(ctx, lease.RenewRequest{Name: name, Holder: "agent", FencingToken: l.FencingToken}); !errors.Is(err, lease.ErrSessionHeld) {
		t.Fatalf("plain renew of a session-held holding = %v; want ErrSessionHeld", err)
	}
	if evs := rec.take(); len(evs) != 1 || evs[0].Type != lease.EventAcquired {
		t.Fatalf("events %+v; want the acquired one only", evs)
	}

	// The session dies: released, reason session_expired, the session kept.
	if got, err = cur.ExpireSession(ctx, lease.ReleaseRequest{Name: name, Holder: "agent", FencingToken: l.FencingToken, Session: sessionRef(2)}); err != nil || got.Held() || !got.Session {
		t.Fatalf("ExpireSession = %+v, %v; want the holding ended, still marked with its session", got, err)
	}
	if evs := rec.take(); len(evs) != 1 || evs[0].Type != lease.EventReleased || evs[0].Reason != lease.ReasonSessionExpired {
		t.Fatalf("ExpireSession reported %+v; want one released event, reason session_expired", evs)
	}
	// A resume restarts it with the same token, nobody having acquired.
	if got, err = old.TakeOver(ctx, lease.TakeOverRequest{Name: name, Holder: "agent", FencingToken: l.FencingToken, TTL: ttl, Session: *sessionRef(3)}); err != nil ||
		!got.Held() || got.FencingToken != l.FencingToken || got.SessionEpoch != 3 {
		t.Fatalf("TakeOver after the session expired = %+v, %v; want token %d held again at epoch 3", got, err, l.FencingToken)
	}
	// A plain release of the live session-held holding is ErrSessionHeld
	// (docs/contract.md §3): only its session ends it.
	if _, err = cur.Release(ctx, lease.ReleaseRequest{Name: name, Holder: "agent", FencingToken: l.FencingToken}); !errors.Is(err, lease.ErrSessionHeld) {
		t.Fatalf("plain release of a live session-held holding = %v; want ErrSessionHeld", err)
	}
	// A release through the session at its epoch ends it and clears the
	// session, so that no resume restarts it.
	if got, err = cur.Release(ctx, lease.ReleaseRequest{Name: name, Holder: "agent", FencingToken: l.FencingToken, Session: sessionRef(3)}); err != nil || got.Held() || got.Session {
		t.Fatalf("release through the session = %+v, %v; want the holding ended without its session", got, err)
	}
	if got, err = old.Get(ctx, name); err != nil || got.SessionKey != "" || got.SessionEpoch != 0 || got.SessionWindow != 0 {
		t.Fatalf("Get after the release = %+v, %v; want no session", got, err)
	}
	if _, err := old.TakeOver(ctx, lease.TakeOverRequest{Name: name, Holder: "agent", FencingToken: l.FencingToken, TTL: ttl, Session: *sessionRef(4)}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("TakeOver after the release = %v; want ErrLost", err)
	}
}
