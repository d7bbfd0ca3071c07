package wire

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// sessionLease is a holding held through a session, as the Manager shows
// it.
func sessionLease() lease.Lease {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	return lease.ViewAt(&lease.Record{Name: "a", Holder: "h", FencingToken: 3, TTL: 30 * time.Second,
		AcquireTime: t0, RenewTime: t0, ExpireTime: t0.Add(30 * time.Second), Transitions: 3,
		SessionKey: strings.Repeat("ab", 32), SessionEpoch: 7, SessionWindow: 1500 * time.Millisecond}, t0)
}

// TestLeaseSessionMembers: the lease JSON of a session-held holding has
// "session": true and sessionWindowMs, and never the session key or
// epoch; a plain holding has neither member; both parse back.
func TestLeaseSessionMembers(t *testing.T) {
	l := sessionLease()
	b, err := Marshal(FromLease(l))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["session"] != true || m["sessionWindowMs"] != 1500.0 {
		t.Fatalf("session-held lease JSON %s; want \"session\":true and \"sessionWindowMs\":1500", b)
	}
	if strings.Contains(string(b), l.SessionKey) || strings.Contains(strings.ToLower(string(b)), "epoch") || strings.Contains(string(b), "sessionKey") {
		t.Fatalf("lease JSON %s shows the session key or epoch", b)
	}
	var w Lease
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	back, err := w.ToLease()
	if err != nil || !back.Session || back.SessionWindow != 1500*time.Millisecond {
		t.Fatalf("ToLease = %+v, %v; want a session-held lease, window 1.5s", back, err)
	}

	plain := l
	plain.Record.SessionKey, plain.Record.SessionEpoch, plain.Record.SessionWindow = "", 0, 0
	plain = lease.ViewAt(&plain.Record, plain.ServerTime)
	b, _ = Marshal(FromLease(plain))
	if strings.Contains(string(b), `"session`) {
		t.Fatalf("plain lease JSON %s has session members", b)
	}
}

// TestReleasedEventReason: a released event on a session's death carries
// reason session_expired through the event JSON, and a plain release
// none.
func TestReleasedEventReason(t *testing.T) {
	l := sessionLease()
	l.ExpireTime = l.ServerTime
	for _, reason := range []string{lease.ReasonSessionExpired, ""} {
		ev := lease.Event{Type: lease.EventReleased, Lease: l, Time: l.ServerTime, Reason: reason}
		b, err := MarshalEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		if r, ok := m["reason"]; reason == "" && ok || reason != "" && r != reason {
			t.Fatalf("released event %s; want reason %q", b, reason)
		}
		back, err := UnmarshalEvent(b)
		if err != nil || back.Reason != reason || back.Type != lease.EventReleased {
			t.Fatalf("UnmarshalEvent(%s) = %+v, %v; want a released event with reason %q", b, back, err, reason)
		}
	}
}
