package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/membudget"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// The limits of session sockets (docs/contract.md §14 Limits): each
// refusal changes nothing and says why, and what a socket took comes
// back when it ends.

// dialStatus tries an upgrade as principal and returns the refusal's
// status and problem code (0 when the upgrade succeeded; it is closed).
func dialStatus(t *testing.T, url, principal string) (int, string) {
	t.Helper()
	h := http.Header{}
	if principal != "" {
		h.Set("Authorization", "Bearer "+principal)
	}
	c, resp, err := websocket.Dial(t.Context(), url, &websocket.DialOptions{HTTPHeader: h, Subprotocols: []string{httpapi.SessionSubprotocol}})
	if err == nil {
		_ = c.CloseNow()
		return 0, ""
	}
	if resp == nil {
		t.Fatalf("dial: %v", err)
	}
	var p struct{ Code string }
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, p.Code
}

// TestSessionOpenTimeout: an upgraded socket that sends neither open nor
// resume within the open timeout gets error 408 request_timeout and is
// closed with 1008, with an audit line, and its slot comes back; a socket
// that opened in time is not touched when the timer fires.
func TestSessionOpenTimeout(t *testing.T) {
	clock := newManualClock(7 * time.Second)
	sink, log := newAuditSink()
	in := newSessionInstance(t, memory.New(), session.Config{Clock: clock, OpenTimeout: 7 * time.Second}, httpapi.Config{Audit: log})
	done := socketsDone(t, in.srv)
	silent := dial(t, in.srv.URL, "")
	timer := clock.next(t)
	if taken, _ := in.reg.Slots(); taken != 1 {
		t.Fatalf("%d slots taken by an unopened socket; want 1", taken)
	}
	timer.fire()
	m := silent.expect("error")
	if problemCode(m) != "request_timeout" || m["re"] != nil {
		t.Fatalf("got %v; want error request_timeout without re", m)
	}
	if code := silent.closed(); code != websocket.StatusPolicyViolation {
		t.Fatalf("closed with %v; want 1008", code)
	}
	if l := sink.wait(t, "session_socket_close"); l.Outcome != "request_timeout" || !strings.HasPrefix(l.Detail, "1008: ") {
		t.Fatalf("audit line %+v; want request_timeout, 1008", l)
	}
	waitDone(t, done, 1)
	if taken, spare := in.reg.Slots(); taken != 0 || spare != 0 {
		t.Fatalf("slots %d, %d after the timeout; want none", taken, spare)
	}
	opener := dial(t, in.srv.URL, "")
	timer = clock.next(t)
	opener.open(1000)
	timer.fire()
	opener.ackedHeartbeat()
}

// TestSessionSocketsCountFromTheUpgrade: unopened sockets take the
// caller's session slots, so one past the limit is refused before the
// upgrade (429, audited); a socket that closes gives its slot back; a
// caller at its limit still resumes here the session it is moving.
func TestSessionSocketsCountFromTheUpgrade(t *testing.T) {
	sink, log := newAuditSink()
	in := newSessionInstance(t, memory.New(), session.Config{MaxPerCaller: 2}, httpapi.Config{Authenticator: tokenAuth{}, Audit: log})
	done := socketsDone(t, in.srv)
	url := wsURL(in.srv)
	a := dial(t, in.srv.URL, "alice")
	op := a.open(5000)
	idle := dial(t, in.srv.URL, "alice")
	spare := dial(t, in.srv.URL, "alice") // a spare slot: alice has one session here
	if st, code := dialStatus(t, url, "alice"); st != 429 || code != "resource_exhausted" {
		t.Fatalf("a fourth socket of alice: %d %s; want 429 resource_exhausted", st, code)
	}
	spare.send("open", nil)
	if m := spare.expect("error"); problemCode(m) != "resource_exhausted" {
		t.Fatalf("open on a spare slot: %v; want 429 resource_exhausted", m)
	}
	if code := spare.closed(); code != websocket.StatusPolicyViolation {
		t.Fatalf("closed with %v; want 1008", code)
	}
	if l := sink.wait(t, "session_connect"); l.Outcome != "resource_exhausted" || l.Principal != "alice" || !strings.Contains(l.Detail, "sessions of this caller") {
		t.Fatalf("audit line %+v", l)
	}
	if st, _ := dialStatus(t, url, "bob"); st != 0 { // another caller is not touched
		t.Fatalf("bob's socket refused: %d", st)
	}
	waitDone(t, done, 2) // bob's and the spare
	_ = idle.c.Close(websocket.StatusNormalClosure, "")
	waitDone(t, done, 1)
	if taken, _ := in.reg.Slots(); taken != 1 {
		t.Fatalf("%d slots after the unopened sockets closed; want 1 (the session)", taken)
	}
	// At the limit again, with the session's socket gone: the new socket
	// gets a spare slot and moves the session, without a second slot.
	b := dial(t, in.srv.URL, "alice")
	b.open(5000)
	_ = a.c.CloseNow()
	waitDone(t, done, 1)
	a2 := dial(t, in.srv.URL, "alice")
	a2.send("resume", map[string]any{"sessionId": op["sessionId"], "epoch": 2})
	if m := a2.expect("resumed"); m["epoch"] != 2.0 {
		t.Fatalf("resume at the limit: %v", m)
	}
	a2.ackedHeartbeat()
	if taken, spare := in.reg.Slots(); taken != 2 || spare != 0 {
		t.Fatalf("slots %d, %d after the move; want 2, 0", taken, spare)
	}
}

// TestSessionOutQueueBounded: a client that does not read while its
// answers pass LEASESVC_SESSION_OUT_BUFFER has its socket closed with
// 1013 and an audit line; the session lives on (its lease still held, no
// release) and resumes on a new socket; the bytes come back.
func TestSessionOutQueueBounded(t *testing.T) {
	sink, log := newAuditSink()
	budget, err := membudget.New(64<<20, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	in := newSessionInstance(t, memory.New(), session.Config{OutBuffer: 8 << 10}, httpapi.Config{Audit: log, Limits: httpapi.Limits{Memory: budget}})
	sub := in.hub.Subscribe("a")
	defer in.hub.Unsubscribe(sub)
	srv, g := gatedServer(t, in)
	done := socketsDone(t, srv, in.srv)
	w := dial(t, srv.URL, "")
	op := w.open(5000)
	w.send("acquire", map[string]any{"name": "a", "holder": "h"})
	tok := w.expect("result")["lease"].(map[string]any)["fencingToken"]
	g.shut() // the client reads nothing from here
	pad := map[string]any{"pad": strings.Repeat("x", 3000)}
	for range 4 { // the first is being written; the next pass 8 KiB
		w.send("renew", map[string]any{"name": "a", "holder": "h", "fencingToken": tok, "metadata": pad})
	}
	l := sink.wait(t, "session_socket_close")
	if l.Outcome != "resource_exhausted" || !strings.HasPrefix(l.Detail, "1013: ") || !strings.Contains(l.Detail, "LEASESVC_SESSION_OUT_BUFFER") {
		t.Fatalf("audit line %+v; want resource_exhausted, 1013, the setting", l)
	}
	g.release()
	if code := w.closed(); code != websocket.StatusTryAgainLater {
		t.Fatalf("closed with %v; want 1013", code)
	}
	waitDone(t, done, 1)
	if used := budget.Stats().Used; used != 0 {
		t.Fatalf("%d bytes charged after the socket ended; want 0", used)
	}
	if got, err := in.m.Get(t.Context(), "a"); err != nil || !got.Held() || in.reg.Len() != 1 {
		t.Fatalf("after the close: %+v, %v, %d sessions; want the lease held by the live session", got, err, in.reg.Len())
	}
	w2 := dial(t, in.srv.URL, "")
	w2.send("resume", map[string]any{"sessionId": op["sessionId"], "epoch": 2,
		"leases": []any{map[string]any{"name": "a", "holder": "h", "fencingToken": tok}}})
	res := w2.expect("resumed")
	if len(res["leases"].([]any)) != 1 || len(res["lost"].([]any)) != 0 {
		t.Fatalf("resumed %v; want the lease kept", res)
	}
	w2.ackedHeartbeat()
	select {
	case ev := <-sub.C:
		if ev.Type == lease.EventReleased {
			t.Fatalf("the lease was released: %+v", ev)
		}
	default:
	}
	if used := budget.Stats().Used; used < httpapi.SessionCost || used > httpapi.SessionCost+1<<10 {
		t.Fatalf("%d bytes charged for one session socket; want %d and an ack at most", used, httpapi.SessionCost)
	}
	_ = w2.c.Close(websocket.StatusNormalClosure, "")
	waitDone(t, done, 1)
	if used := budget.Stats().Used; used != 0 {
		t.Fatalf("%d bytes charged after every socket ended; want 0", used)
	}
}

// TestSessionBudgetRefusals: a socket whose fixed cost the memory budget
// cannot meet is refused before the upgrade, 503 when the instance's
// total is spent and 429 when the caller's share is; an open it cannot
// meet is error and 1008, registering nothing. Every charge comes back.
func TestSessionBudgetRefusals(t *testing.T) {
	sink, log := newAuditSink()
	total, err := membudget.New(httpapi.SessionCost+httpapi.SocketCost/2, 0)
	if err != nil {
		t.Fatal(err)
	}
	share, err := membudget.New(1<<30, httpapi.SocketCost*2+(httpapi.SessionCost-httpapi.SocketCost)/2) // two sockets, not a third, and no open
	if err != nil {
		t.Fatal(err)
	}
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{Audit: log, Limits: httpapi.Limits{Memory: total}})
	in2 := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{Audit: log, Limits: httpapi.Limits{Memory: share}})
	done := socketsDone(t, in.srv, in2.srv)
	w := dial(t, in.srv.URL, "")
	w.open(1000)
	if st, code := dialStatus(t, wsURL(in.srv), ""); st != 503 || code != "unavailable" {
		t.Fatalf("a socket past the instance's budget: %d %s; want 503 unavailable", st, code)
	}
	if l := sink.wait(t, "session_connect"); l.Outcome != "unavailable" || !strings.Contains(l.Detail, "LEASESVC_MEMORY_BUDGET") {
		t.Fatalf("audit line %+v", l)
	}
	// One session socket's charge, and at most a message being written.
	if taken, _ := in.reg.Slots(); taken != 1 || total.Stats().Used < httpapi.SessionCost || total.Stats().Used > httpapi.SessionCost+1<<10 {
		t.Fatalf("the refusal changed the slots (%d) or the budget (%d)", taken, total.Stats().Used)
	}
	w.ackedHeartbeat()

	x, y := dial(t, in2.srv.URL, ""), dial(t, in2.srv.URL, "")
	if st, code := dialStatus(t, wsURL(in2.srv), ""); st != 429 || code != "resource_exhausted" {
		t.Fatalf("a socket past the caller's share: %d %s; want 429 resource_exhausted", st, code)
	}
	x.send("open", nil)
	if m := x.expect("error"); problemCode(m) != "resource_exhausted" || m["retryAfter"] != 1.0 {
		t.Fatalf("an open past the caller's share: %v; want error 429 with retryAfter", m)
	}
	if code := x.closed(); code != websocket.StatusPolicyViolation {
		t.Fatalf("closed with %v; want 1008", code)
	}
	if in2.reg.Len() != 0 {
		t.Fatal("a refused open registered a session")
	}
	_ = y.c.Close(websocket.StatusNormalClosure, "")
	_ = w.c.Close(websocket.StatusNormalClosure, "")
	waitDone(t, done, 3) // w, x and y: the refused dials never became sockets
	if u1, u2 := total.Stats().Used, share.Stats().Used; u1 != 0 || u2 != 0 {
		t.Fatalf("budgets hold %d and %d bytes after every socket ended; want 0", u1, u2)
	}
}

// TestSessionWritesShareTheRateLimit: acquire, renew, release and
// transfer over a session take from the bucket of the caller's REST
// calls, leaving half of it to them (a resume's upgrade above all); past
// it a write is error 429 with retryAfter and nothing else happens
// (nothing acquired, the socket and its acks go on), heartbeats take
// nothing, and the caller's REST calls spend the rest of the same bucket.
func TestSessionWritesShareTheRateLimit(t *testing.T) {
	lim := auth.NewLimiter(0.001, 6) // no refill within the test; writes keep 3
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{Authenticator: tokenAuth{}, Limiter: lim})
	w := dial(t, in.srv.URL, "alice") // the upgrade takes a token, as any request does: 5 left
	w.open(1000)
	w.send("acquire", map[string]any{"name": "a", "holder": "h"})
	w.expect("result") // 4 left
	for range 5 {
		w.ackedHeartbeat()
	}
	w.send("acquire", map[string]any{"name": "b", "holder": "h"})
	w.expect("result") // 3 left: the reserve
	re := w.send("acquire", map[string]any{"name": "c", "holder": "h"})
	m := w.expect("error")
	if m["re"] != float64(re) || problemCode(m) != "resource_exhausted" || m["retryAfter"] == nil || m["problem"].(map[string]any)["status"] != 429.0 {
		t.Fatalf("a write past the rate limit: %v; want error 429 resource_exhausted with retryAfter", m)
	}
	w.ackedHeartbeat()
	if _, err := in.m.Get(t.Context(), "c"); err == nil {
		t.Fatal("the refused acquire made the lease")
	}
	get := func(principal string) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, in.srv.URL+"/v1/leases/a", nil)
		req.Header.Set("Authorization", "Bearer "+principal)
		resp, err := in.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 3 { // the reserve the writes left
		if st := get("alice"); st != 200 {
			t.Fatalf("alice's REST call %d of the reserve: %d; want 200", i+1, st)
		}
	}
	if st := get("alice"); st != 429 {
		t.Fatalf("alice's REST call past the bucket her session shares: %d; want 429", st)
	}
	if st := get("bob"); st != 200 {
		t.Fatalf("bob's REST call: %d; want 200", st)
	}
	w.ackedHeartbeat()
}

// TestSessionCloseAudit: the closes for a broken protocol, a binary
// frame, a message too big and too many messages each leave an audit
// line with their code.
func TestSessionCloseAudit(t *testing.T) {
	sink, log := newAuditSink()
	in := newSessionInstance(t, memory.New(), session.Config{MaxMessage: 4096, MessageRate: 20}, httpapi.Config{Audit: log})
	for _, tc := range []struct {
		name    string
		send    func(w *wsClient)
		outcome string
		code    string
	}{
		{"malformed JSON", func(w *wsClient) { w.raw([]byte(`{"type":`)) }, "session_protocol", "1008"},
		{"binary frame", func(w *wsClient) { _ = w.c.Write(t.Context(), websocket.MessageBinary, []byte(`{}`)) }, "session_protocol", "1003"},
		{"too big", func(w *wsClient) { w.raw([]byte(`{"pad":"` + strings.Repeat("x", 5000) + `"}`)) }, "payload_too_large", "1009"},
		{"too many messages", func(w *wsClient) {
			for i := range 40 {
				if w.c.Write(t.Context(), websocket.MessageText, []byte(`{"type":"heartbeat","id":`+strconv.Itoa(i+10)+`}`)) != nil {
					break
				}
			}
		}, "resource_exhausted", "1008"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := dial(t, in.srv.URL, "")
			w.open(1000)
			tc.send(w)
			code := w.closed()
			l := sink.wait(t, "session_socket_close")
			if l.Outcome != tc.outcome || !strings.HasPrefix(l.Detail, tc.code+": ") || len(l.Session) != 8 {
				t.Fatalf("audit line %+v (closed with %v); want %s, %s, the session's 8 characters", l, code, tc.outcome, tc.code)
			}
		})
	}
}

// slowStore holds the reads and writes of names under "slow." until
// open is closed.
type slowStore struct {
	backend.Store
	open chan struct{}
}

func (s slowStore) Get(ctx context.Context, name string) (backend.Snapshot, error) {
	if strings.HasPrefix(name, "slow.") {
		<-s.open
	}
	return s.Store.Get(ctx, name)
}

func (s slowStore) Try(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	if strings.HasPrefix(name, "slow.") {
		<-s.open
	}
	return s.Store.Try(ctx, name, decide)
}

// TestSessionQuickOpsBounded: at most 32 operations that do not wait are
// under way on one socket (each holds its answer until it is queued);
// one more is error 429 at once, and the socket and its acks go on.
func TestSessionQuickOpsBounded(t *testing.T) {
	store := slowStore{Store: memory.New(), open: make(chan struct{})}
	in := newSessionInstance(t, store, session.Config{}, httpapi.Config{})
	w := dial(t, in.srv.URL, "")
	w.open(5000)
	for i := range 32 {
		w.send("acquire", map[string]any{"name": "slow." + strconv.Itoa(i), "holder": "h"})
	}
	re := w.send("acquire", map[string]any{"name": "slow.32", "holder": "h"})
	m := w.expect("error")
	if detail, _ := m["problem"].(map[string]any)["detail"].(string); m["re"] != float64(re) || problemCode(m) != "resource_exhausted" || !strings.Contains(detail, "under way on this socket") {
		t.Fatalf("the 33rd operation under way: %v; want error 429 resource_exhausted", m)
	}
	w.ackedHeartbeat()
	close(store.open)
	for range 32 {
		w.expect("result")
	}
}
