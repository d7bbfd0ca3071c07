package audit_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasesvc/leasesvc/internal/audit"
	"github.com/leasesvc/leasesvc/lease"
)

// line writes one audit record and decodes it.
func line(t *testing.T, write func(a *audit.Log)) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	write(audit.New(slog.New(slog.NewJSONHandler(&buf, nil))))
	var out map[string]any
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatalf("audit line %q: %v", buf.String(), err)
	}
	if out["msg"] != "audit" || out["level"] != "INFO" {
		t.Fatalf("audit line %v, want INFO audit", out)
	}
	labels, _ := out[audit.LabelsKey].(map[string]any)
	if labels["leasesvc_log"] != "audit" {
		t.Fatalf("audit line labels %v, want leasesvc_log=audit", out[audit.LabelsKey])
	}
	return out["audit"].(map[string]any)
}

func TestChangeNamesWhoActed(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 123456000, time.UTC)
	l := lease.Lease{Record: lease.Record{Name: "team-a.s", Holder: "w1", FencingToken: 7, Principal: "agent@example.com", ExpireTime: at}, ServerTime: at}
	cases := []struct {
		ev   lease.Event
		want map[string]any
	}{
		{lease.Event{Type: lease.EventAcquired, Lease: l, Time: at, PreviousHolder: "w0", PreviousExpired: true},
			map[string]any{"action": "acquired", "principal": "agent@example.com", "previousHolder": "w0", "previousExpired": true}},
		{lease.Event{Type: lease.EventReleased, Lease: l, Time: at},
			map[string]any{"action": "released", "principal": "agent@example.com"}},
		{lease.Event{Type: lease.EventRevoked, Lease: l, Time: at, Reason: "stuck", Operator: "oncall@example.com"},
			map[string]any{"action": "revoked", "principal": "oncall@example.com", "reason": "stuck", "holderPrincipal": "agent@example.com"}},
		{lease.Event{Type: lease.EventExpired, Lease: l, Time: at},
			map[string]any{"action": "expired", "principal": ""}},
		{lease.Event{Type: lease.EventDeleted, Lease: l, Time: at, Operator: "janitor@example.com"},
			map[string]any{"action": "deleted", "principal": "janitor@example.com", "holderPrincipal": "agent@example.com", "reason": nil}},
		{lease.Event{Type: lease.EventDeleted, Lease: l, Time: at, Reason: "retention"},
			map[string]any{"action": "deleted", "principal": "", "reason": "retention"}},
	}
	for _, c := range cases {
		got := line(t, func(a *audit.Log) { a.Change(t.Context(), c.ev) })
		if got["lease"] != "team-a.s" || got["fencingToken"] != 7.0 || got["holder"] != "w1" || got["outcome"] != "ok" ||
			got["eventTime"] != "2026-11-21T10:00:00.123456Z" {
			t.Errorf("%s: %v, want lease, token, holder, outcome ok, eventTime", c.ev.Type, got)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %s = %v, want %v", c.ev.Type, k, got[k], v)
			}
		}
	}
}

func TestRefused(t *testing.T) {
	got := line(t, func(a *audit.Log) {
		a.Refused(t.Context(), "revoke", "permission_denied", "bob@example.com", "team-a.s", "no admin")
	})
	want := map[string]any{"action": "revoke", "outcome": "permission_denied", "principal": "bob@example.com", "lease": "team-a.s", "detail": "no admin"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	var nilLog *audit.Log
	nilLog.Refused(t.Context(), "get", "unauthenticated", "", "x", "") // a nil Log writes nothing and does not panic
}

// TestLinesAreCapped: whatever a caller sends, an audit line stays small
// (Cloud Logging refuses entries over 256 KB) and valid UTF-8.
func TestLinesAreCapped(t *testing.T) {
	huge := strings.Repeat("x", 500<<10) + "\xff"
	var buf bytes.Buffer
	a := audit.New(slog.New(slog.NewJSONHandler(&buf, nil)))
	a.Refused(t.Context(), "acquire", "unauthenticated", huge, huge, huge)
	a.Change(t.Context(), lease.Event{Type: lease.EventRevoked, Lease: lease.Lease{Record: lease.Record{Name: huge, Holder: huge, Principal: huge}}, Reason: huge, Operator: huge})
	for i, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if len(l) > 16<<10 {
			t.Errorf("line %d has %d bytes, want ≤ 16 KB", i, len(l))
		}
		if !utf8.ValidString(l) || !strings.Contains(l, "…") {
			t.Errorf("line %d is not valid UTF-8 or not marked as cut: %.200q", i, l)
		}
	}
}

// TestSession: a session step names the session by its short key only.
func TestSession(t *testing.T) {
	got := line(t, func(a *audit.Log) {
		a.Session(t.Context(), "session_resume", "session_conflict", "alice@example.com", "0123abcd", "another resume won")
	})
	want := map[string]any{"action": "session_resume", "outcome": "session_conflict", "principal": "alice@example.com", "session": "0123abcd", "detail": "another resume won"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	var nilLog *audit.Log
	nilLog.Session(t.Context(), "session_open", "ok", "", "", "") // a nil Log writes nothing
}

// TestSessionNamesAreShort: a session's own record and a holding taken
// through a session name the session by 8 hex characters of its key
// (docs/contract.md §14), never the 32 of the record's name nor the 64 of
// the key; a holding a session's death ended says session_expired.
func TestSessionNamesAreShort(t *testing.T) {
	key := strings.Repeat("0123abcd", 8) // 64 hex characters
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	rec := lease.Lease{Record: lease.Record{Name: lease.SessionRecordName(key), Holder: "session", FencingToken: 1, SessionKey: key, ExpireTime: at}, ServerTime: at}
	got := line(t, func(a *audit.Log) {
		a.Change(t.Context(), lease.Event{Type: lease.EventAcquired, Lease: rec, Time: at})
	})
	if got["lease"] != lease.SessionRecordPrefix+"0123abcd" || got["session"] != "0123abcd" {
		t.Errorf("session record's line: lease %v, session %v; want %s0123abcd and 0123abcd", got["lease"], got["session"], lease.SessionRecordPrefix)
	}
	held := lease.Lease{Record: lease.Record{Name: "team-a.s", Holder: "w1", Principal: "agent@example.com", FencingToken: 4, SessionKey: key, ExpireTime: at}, ServerTime: at}
	got = line(t, func(a *audit.Log) {
		a.Change(t.Context(), lease.Event{Type: lease.EventReleased, Lease: held, Time: at, Reason: lease.ReasonSessionExpired})
	})
	if got["action"] != "released" || got["reason"] != lease.ReasonSessionExpired || got["session"] != "0123abcd" || got["principal"] != "agent@example.com" {
		t.Errorf("a crashed agent's session end: %v; want released, reason session_expired, session 0123abcd", got)
	}
	got = line(t, func(a *audit.Log) {
		a.Change(t.Context(), lease.Event{Type: lease.EventReleased, Lease: held, Time: at})
	})
	if _, ok := got["reason"]; ok {
		t.Errorf("a plain release: %v; want no reason", got)
	}
	got = line(t, func(a *audit.Log) { a.Session(t.Context(), "session_open", "ok", "p", key, "") })
	if got["session"] != "0123abcd" {
		t.Errorf("session step given the whole key: session %v; want 0123abcd", got["session"])
	}
}
