package httpapi_test

import (
	"testing"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/session"
)

// TestSessionV1ResumeRefused: a client of leasesvc.session.v1 (resumes
// without an epoch) still opens and heartbeats, but its resume is refused
// with 400 invalid_argument naming epoch and 1008 (docs/contract.md §14
// Old clients): never an unordered resume. A client offering both gets v2.
func TestSessionV1ResumeRefused(t *testing.T) {
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{})
	old := dialProto(t, in.srv.URL, "", httpapi.SessionSubprotocolV1)
	if got := old.c.Subprotocol(); got != httpapi.SessionSubprotocolV1 {
		t.Fatalf("a v1 client got subprotocol %q", got)
	}
	op := old.open(1000)
	old.ackedHeartbeat()
	again := dialProto(t, in.srv.URL, "", httpapi.SessionSubprotocolV1)
	again.send("resume", map[string]any{"sessionId": op["sessionId"], "epoch": 2})
	m := again.expect("error")
	if problemCode(m) != "invalid_argument" || !namesField(m, "epoch") {
		t.Fatalf("a v1 resume: %v; want invalid_argument naming epoch", m)
	}
	if code := again.closed(); code != websocket.StatusPolicyViolation {
		t.Fatalf("a refused v1 resume closed with %v; want 1008", code)
	}
	old.ackedHeartbeat() // the session lives on where it was
	both := dialProto(t, in.srv.URL, "", httpapi.SessionSubprotocolV1, httpapi.SessionSubprotocol)
	if got := both.c.Subprotocol(); got != httpapi.SessionSubprotocol {
		t.Fatalf("a client offering both got %q; want %q", got, httpapi.SessionSubprotocol)
	}
}

// namesField reports whether an error message's problem lists field.
func namesField(m map[string]any, field string) bool {
	p, _ := m["problem"].(map[string]any)
	errs, _ := p["errors"].([]any)
	for _, e := range errs {
		if f, _ := e.(map[string]any); f["field"] == field {
			return true
		}
	}
	return false
}

// TestSessionResumesOrdered: a resume whose epoch is not above the
// session's is 409 session_conflict with the session's epoch, and takes
// nothing (docs/contract.md §14, S1): a resume that reaches a paused
// instance late loses to the later one.
func TestSessionResumesOrdered(t *testing.T) {
	store := memory.New()
	a := newSessionInstance(t, store, session.Config{}, httpapi.Config{})
	b := newSessionInstance(t, store, session.Config{}, httpapi.Config{})
	wa := dial(t, a.srv.URL, "")
	op := wa.open(1000)
	wa.send("acquire", map[string]any{"name": "x", "holder": "h"})
	tok := wa.expect("result")["lease"].(map[string]any)["fencingToken"]
	claims := []any{map[string]any{"name": "x", "holder": "h", "fencingToken": tok}}
	later := dial(t, b.srv.URL, "")
	later.send("resume", map[string]any{"sessionId": op["sessionId"], "epoch": 3, "leases": claims})
	if m := later.expect("resumed"); m["epoch"] != 3.0 {
		t.Fatalf("resumed at %v; want the proposed epoch 3", m["epoch"])
	}
	late := dial(t, a.srv.URL, "")
	late.send("resume", map[string]any{"sessionId": op["sessionId"], "epoch": 2, "leases": claims})
	m := late.expect("error")
	if p, _ := m["problem"].(map[string]any); problemCode(m) != "session_conflict" || p["epoch"] != 3.0 || p["status"] != 409.0 {
		t.Fatalf("the late resume: %v; want 409 session_conflict with epoch 3", m)
	}
	later.ackedHeartbeat()
	if l, err := a.m.Get(t.Context(), "x"); err != nil || !l.Held() || l.SessionEpoch != 3 {
		t.Fatalf("the lease: %+v, %v; want held at epoch 3", l, err)
	}
}

// TestSessionOpOnMovedSession: a release sent on the socket of an owner
// the session moved from is 503 unavailable with Retry-After (resume and
// retry), and the holding stays with the new owner (docs/contract.md §14,
// issue 36 finding 3).
func TestSessionOpOnMovedSession(t *testing.T) {
	store := memory.New()
	a := newSessionInstance(t, store, session.Config{}, httpapi.Config{})
	b := newSessionInstance(t, store, session.Config{}, httpapi.Config{})
	wa := dial(t, a.srv.URL, "")
	op := wa.open(1000)
	wa.send("acquire", map[string]any{"name": "x", "holder": "h"})
	tok := wa.expect("result")["lease"].(map[string]any)["fencingToken"]
	wb := dial(t, b.srv.URL, "")
	wb.send("resume", map[string]any{"sessionId": op["sessionId"], "epoch": 2,
		"leases": []any{map[string]any{"name": "x", "holder": "h", "fencingToken": tok}}})
	wb.expect("resumed")
	wa.send("release", map[string]any{"name": "x", "holder": "h", "fencingToken": tok})
	m := wa.expect("error")
	if p, _ := m["problem"].(map[string]any); problemCode(m) != "unavailable" || p["status"] != 503.0 {
		t.Fatalf("release on the moved-from socket: %v; want 503 unavailable", m)
	}
	wb.ackedHeartbeat()
	if l, err := b.m.Get(t.Context(), "x"); err != nil || !l.Held() || l.SessionEpoch != 2 {
		t.Fatalf("the lease: %+v, %v; want held at epoch 2", l, err)
	}
	wb.send("release", map[string]any{"name": "x", "holder": "h", "fencingToken": tok})
	if m := wb.expect("result"); m["lease"].(map[string]any)["held"] != false {
		t.Fatalf("the release retried through the resumed session: %v", m)
	}
}
