package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// tokenAuth authenticates "Bearer <principal>": the token is the principal.
type tokenAuth struct{}

func (tokenAuth) Authenticate(r *http.Request) (string, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return "", errors.New("no token")
	}
	return tok, nil
}

// sessionInstance is one instance of the service with sessions on: its own
// Manager, hub and Registry over a store that instances may share.
type sessionInstance struct {
	m   *lease.Manager
	hub *hub.Hub
	reg *session.Registry
	h   *httpapi.Handler
	srv *httptest.Server
}

// newSessionInstance starts an instance over store. The hub gets this
// instance's events only (tests that need another instance's events
// publish them across).
func newSessionInstance(t testing.TB, store backend.Store, scfg session.Config, hcfg httpapi.Config) *sessionInstance {
	t.Helper()
	in := &sessionInstance{hub: hub.New()}
	m, err := lease.NewManager(store, lease.Config{OnChange: in.hub.Publish})
	if err != nil {
		t.Fatal(err)
	}
	in.m = m
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	scfg.Events, scfg.Logger = in.hub, log
	if scfg.LeaseTTL == 0 {
		scfg.LeaseTTL = 3 * time.Second // renewals every second
	}
	in.reg, err = session.New(session.Manager{M: m}, scfg)
	if err != nil {
		t.Fatal(err)
	}
	hcfg.Logger, hcfg.Events, hcfg.Sessions = log, in.hub, in.reg
	h, err := httpapi.New(m, hcfg)
	if err != nil {
		t.Fatal(err)
	}
	in.h = h
	in.srv = httptest.NewServer(h)
	t.Cleanup(func() {
		in.srv.CloseClientConnections()
		in.srv.Close()
		in.reg.Stop()
	})
	return in
}

// wsClient is a test agent's socket.
type wsClient struct {
	t    *testing.T
	c    *websocket.Conn
	id   int64
	msgs chan map[string]any
	end  chan error // the read error that ended the socket
	// held keeps the messages ackedHeartbeat read past, for next.
	held []map[string]any
}

// dial opens a session socket as principal ("" sends no credentials).
func dial(t *testing.T, url, principal string) *wsClient {
	t.Helper()
	return dialProto(t, url, principal, httpapi.SessionSubprotocol)
}

// dialProto is dial offering the subprotocols protos.
func dialProto(t *testing.T, url, principal string, protos ...string) *wsClient {
	t.Helper()
	opts := &websocket.DialOptions{Subprotocols: protos, HTTPHeader: http.Header{}}
	if principal != "" {
		opts.HTTPHeader.Set("Authorization", "Bearer "+principal)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, strings.Replace(url, "http", "ws", 1)+httpapi.SessionsPath, opts)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	c.SetReadLimit(8 << 20)
	w := &wsClient{t: t, c: c, msgs: make(chan map[string]any, 1024), end: make(chan error, 1)}
	go func() {
		for {
			_, data, err := c.Read(context.Background())
			if err != nil {
				w.end <- err
				close(w.msgs)
				return
			}
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil {
				t.Errorf("message %s: %v", data, err)
			}
			w.msgs <- m
		}
	}()
	t.Cleanup(func() { _ = c.CloseNow() })
	return w
}

// send sends a request of type typ with the next id and returns the id.
func (w *wsClient) send(typ string, fields map[string]any) int64 {
	w.t.Helper()
	w.id++
	m := map[string]any{"type": typ, "id": w.id}
	for k, v := range fields {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	w.raw(b)
	return w.id
}

func (w *wsClient) raw(b []byte) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, b); err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

// next returns the next message that is not an ack (acks are skipped).
func (w *wsClient) next() map[string]any {
	w.t.Helper()
	if len(w.held) > 0 {
		m := w.held[0]
		w.held = w.held[1:]
		return m
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m, ok := <-w.msgs:
			if !ok {
				w.t.Fatalf("socket ended: %v", <-w.end)
			}
			if m["type"] == "ack" {
				continue
			}
			return m
		case <-timeout:
			w.t.Fatal("no message in 20s")
		}
	}
}

// expect returns the next message, which must be of type typ.
func (w *wsClient) expect(typ string) map[string]any {
	w.t.Helper()
	m := w.next()
	if m["type"] != typ {
		w.t.Fatalf("got %v, want a %s message", m, typ)
	}
	return m
}

// closed waits for the socket to end and returns its close status.
func (w *wsClient) closed() websocket.StatusCode {
	w.t.Helper()
	for {
		select {
		case _, ok := <-w.msgs:
			if !ok {
				return websocket.CloseStatus(<-w.end)
			}
		case <-time.After(20 * time.Second):
			w.t.Fatal("socket still open after 20s")
		}
	}
}

// open opens a session of window ms and returns its opened message.
func (w *wsClient) open(windowMs int) map[string]any {
	w.t.Helper()
	w.send("open", map[string]any{"windowMs": windowMs})
	return w.expect("opened")
}

// problemCode is the code of an error message.
func problemCode(m map[string]any) string {
	p, _ := m["problem"].(map[string]any)
	s, _ := p["code"].(string)
	return s
}

func TestSessionOpenAcquireAck(t *testing.T) {
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{})
	w := dial(t, in.srv.URL, "")
	op := w.open(1000)
	if id, _ := op["sessionId"].(string); len(id) != 43 || op["epoch"] != 1.0 || op["windowMs"] != 1000.0 || op["heartbeatMs"] != 250.0 || op["leaseTtlMs"] != 3000.0 {
		t.Fatalf("opened = %v", op)
	}
	re := w.send("acquire", map[string]any{"name": "a", "holder": "h"})
	res := w.expect("result")
	l := res["lease"].(map[string]any)
	if res["re"] != float64(re) || l["holder"] != "h" || l["held"] != true {
		t.Fatalf("result = %v", res)
	}
	hb := w.send("heartbeat", nil)
	for m := range w.msgs {
		if m["type"] == "ack" {
			if m["re"] != float64(hb) {
				t.Fatalf("ack %v, want re %d", m, hb)
			}
			break
		}
	}
}

// waitEvent waits for an event of sub that match accepts.
func waitEvent(t *testing.T, sub *hub.Sub, match func(lease.Event) bool) lease.Event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-sub.C:
			if match(ev) {
				return ev
			}
		case <-timeout:
			t.Fatal("no matching event in 20s")
		}
	}
}

// ackedHeartbeat sends a heartbeat and waits for its ack.
func (w *wsClient) ackedHeartbeat() {
	w.t.Helper()
	id := w.send("heartbeat", nil)
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m, ok := <-w.msgs:
			if !ok {
				w.t.Fatalf("socket ended: %v", <-w.end)
			}
			if m["type"] == "ack" && m["re"] == float64(id) {
				return
			}
			if m["type"] != "ack" {
				w.held = append(w.held, m)
			}
		case <-timeout:
			w.t.Fatal("no ack in 20s")
		}
	}
}

// TestSessionDeathReleases: an agent that stops heartbeating loses its
// leases a window after its last message, never sooner, with event reason
// session_expired; the session is then gone.
func TestSessionDeathReleases(t *testing.T) {
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{})
	sub := in.hub.Subscribe("a")
	defer in.hub.Unsubscribe(sub)
	w := dial(t, in.srv.URL, "")
	op := w.open(200)
	rec := session.RecordName(session.Key(op["sessionId"].(string)))
	recSub := in.hub.Subscribe(rec)
	defer in.hub.Unsubscribe(recSub)
	w.send("acquire", map[string]any{"name": "a", "holder": "h"})
	w.expect("result")
	var last time.Time
	for range 3 {
		last = time.Now()
		w.ackedHeartbeat()
	}
	ev := waitEvent(t, sub, func(ev lease.Event) bool { return ev.Type == lease.EventReleased })
	gone := time.Since(last)
	if ev.Reason != lease.ReasonSessionExpired {
		t.Fatalf("released event reason %q, want %q", ev.Reason, lease.ReasonSessionExpired)
	}
	if gone < 200*time.Millisecond {
		t.Fatalf("released %v after the last heartbeat was sent, before the 200ms window", gone)
	}
	if gone > 5*time.Second {
		t.Errorf("released %v after the last heartbeat: far past the window", gone)
	}
	l, err := in.m.Get(t.Context(), "a")
	if err != nil || l.Held() {
		t.Fatalf("after death: %+v, %v", l, err)
	}
	// The session is over once its record is released (after its leases:
	// a resume before that restarts it): resuming it is 404.
	waitEvent(t, recSub, func(ev lease.Event) bool { return ev.Type == lease.EventReleased })
	if l, err := in.m.Get(t.Context(), rec); err != nil || l.Held() {
		t.Fatalf("the session record after its released event: %+v, %v; want released", l, err)
	}
	w2 := dial(t, in.srv.URL, "")
	w2.send("resume", map[string]any{"sessionId": op["sessionId"], "epoch": 2})
	if m := w2.expect("error"); problemCode(m) != "session_not_found" {
		t.Fatalf("resume of a dead session: %v", m)
	}
	if code := w2.closed(); code != websocket.StatusPolicyViolation {
		t.Fatalf("closed with %v, want 1008", code)
	}
}

// TestSessionCloseReleases: close releases every lease at once (a normal
// release event) and ends the socket with 1000.
func TestSessionCloseReleases(t *testing.T) {
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{})
	sub := in.hub.Subscribe("a")
	defer in.hub.Unsubscribe(sub)
	w := dial(t, in.srv.URL, "")
	w.open(1000)
	w.send("acquire", map[string]any{"name": "a", "holder": "h"})
	w.expect("result")
	re := w.send("close", nil)
	if m := w.expect("closed"); m["re"] != float64(re) {
		t.Fatalf("closed = %v", m)
	}
	if code := w.closed(); code != websocket.StatusNormalClosure {
		t.Fatalf("closed with %v, want 1000", code)
	}
	ev := waitEvent(t, sub, func(ev lease.Event) bool { return ev.Type == lease.EventReleased })
	if ev.Reason != "" {
		t.Fatalf("close released with reason %q, want none", ev.Reason)
	}
	if in.reg.Len() != 0 {
		t.Fatalf("%d sessions after close", in.reg.Len())
	}
}

// TestSessionResumeElsewhere: a resume on a second instance over the same
// store takes the session (epoch 2) and its leases; the first instance's
// renewals then fail the compare-and-set and it lets the session go.
func TestSessionResumeElsewhere(t *testing.T) {
	store := memory.New()
	a := newSessionInstance(t, store, session.Config{}, httpapi.Config{})
	b := newSessionInstance(t, store, session.Config{}, httpapi.Config{})
	wa := dial(t, a.srv.URL, "")
	op := wa.open(1000)
	wa.send("acquire", map[string]any{"name": "a", "holder": "h"})
	tok := wa.expect("result")["lease"].(map[string]any)["fencingToken"]
	wb := dial(t, b.srv.URL, "")
	wb.send("resume", map[string]any{"sessionId": op["sessionId"], "epoch": 2,
		"leases": []any{map[string]any{"name": "a", "holder": "h", "fencingToken": tok}, map[string]any{"name": "gone", "holder": "h", "fencingToken": 3}}})
	res := wb.expect("resumed")
	if res["epoch"] != 2.0 || len(res["leases"].([]any)) != 1 || len(res["lost"].([]any)) != 1 {
		t.Fatalf("resumed = %v", res)
	}
	if lost := res["lost"].([]any)[0].(map[string]any); lost["name"] != "gone" || lost["reason"] != "deleted" {
		t.Fatalf("lost = %v", lost)
	}
	wb.ackedHeartbeat()
	key := session.Key(op["sessionId"].(string))
	if _, err := a.m.Renew(t.Context(), lease.RenewRequest{Name: "a", Holder: "h", FencingToken: int64(tok.(float64)),
		Session: &lease.SessionRef{Key: key, Epoch: 1}}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("the old epoch's renew: %v, want ErrLost", err)
	}
	// The first instance learns at its next renewal (or when the old
	// socket's window passes) and closes the socket; the agent heartbeats
	// on the new one meanwhile.
	var code websocket.StatusCode
	wb.beatUntil(func() bool {
		select {
		case err := <-wa.end:
			code = websocket.CloseStatus(err)
			return true
		default:
			return false
		}
	})
	if code != websocket.StatusNormalClosure {
		t.Fatalf("old socket closed with %v, want 1000", code)
	}
	l, err := b.m.Get(t.Context(), "a")
	if err != nil || !l.Held() || l.SessionEpoch != 2 {
		t.Fatalf("after the move: %+v, %v", l, err)
	}
	// The old socket's end did not end the session: still acked on b.
	wb.ackedHeartbeat()
}

// beatUntil heartbeats (acked) every 50ms until done reports true.
func (w *wsClient) beatUntil(done func() bool) {
	w.t.Helper()
	limit := time.NewTimer(20 * time.Second)
	defer limit.Stop()
	heartbeat := time.NewTicker(50 * time.Millisecond) // the agent's interval
	defer heartbeat.Stop()
	for !done() {
		w.ackedHeartbeat()
		select {
		case <-heartbeat.C:
		case <-limit.C:
			w.t.Fatal("condition not met in 20s")
		}
	}
}

// TestSessionStartRefusals: the refusals of open and resume, each an error
// answering the request and then a close with 1008.
func TestSessionStartRefusals(t *testing.T) {
	in := newSessionInstance(t, memory.New(), session.Config{MaxPerCaller: 1}, httpapi.Config{Authenticator: tokenAuth{}})
	owner := dial(t, in.srv.URL, "alice")
	op := owner.open(1000)
	for _, tc := range []struct {
		name, principal, typ string
		fields               map[string]any
		code                 string
	}{
		{"window too short", "bob", "open", map[string]any{"windowMs": 199}, "invalid_argument"},
		{"window too long", "bob", "open", map[string]any{"windowMs": 60001}, "invalid_argument"},
		{"unknown id", "bob", "resume", map[string]any{"sessionId": strings.Repeat("A", 43), "epoch": 2}, "session_not_found"},
		{"malformed id", "bob", "resume", map[string]any{"sessionId": "x", "epoch": 2}, "session_not_found"},
		{"another principal's session", "bob", "resume", map[string]any{"sessionId": op["sessionId"], "epoch": 2}, "session_not_found"},
		{"no epoch", "alice", "resume", map[string]any{"sessionId": op["sessionId"]}, "invalid_argument"},
		{"epoch 0", "alice", "resume", map[string]any{"sessionId": op["sessionId"], "epoch": 0}, "invalid_argument"},
		{"epoch not above the session's", "alice", "resume", map[string]any{"sessionId": op["sessionId"], "epoch": 1}, "session_conflict"},
		{"sessions per caller", "alice", "open", nil, "resource_exhausted"},
		{"bad lease claim", "alice", "resume", map[string]any{"sessionId": op["sessionId"], "epoch": 2, "leases": []any{map[string]any{"name": "a"}}}, "invalid_argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := dial(t, in.srv.URL, tc.principal)
			w.send(tc.typ, tc.fields)
			if m := w.expect("error"); problemCode(m) != tc.code || m["re"] != 1.0 {
				t.Fatalf("got %v, want %s", m, tc.code)
			}
			if code := w.closed(); code != websocket.StatusPolicyViolation {
				t.Fatalf("closed with %v, want 1008", code)
			}
		})
	}
	// The owner's session lives on.
	owner.ackedHeartbeat()
}

// TestSessionUpgradeRefusals: refusals before the upgrade are problem+json.
func TestSessionUpgradeRefusals(t *testing.T) {
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{Authenticator: tokenAuth{}})
	url := strings.Replace(in.srv.URL, "http", "ws", 1) + httpapi.SessionsPath
	for _, tc := range []struct {
		name   string
		header http.Header
		protos []string
		status int
	}{
		{"no credentials", http.Header{}, []string{httpapi.SessionSubprotocol}, 401},
		{"no subprotocol", http.Header{"Authorization": {"Bearer alice"}}, nil, 400},
		{"foreign origin", http.Header{"Authorization": {"Bearer alice"}, "Origin": {"https://evil.example"}}, []string{httpapi.SessionSubprotocol}, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := websocket.Dial(t.Context(), url, &websocket.DialOptions{HTTPHeader: tc.header, Subprotocols: tc.protos})
			if err == nil || resp == nil || resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
				t.Fatalf("dial: %v, %+v; want %d problem+json", err, resp, tc.status)
			}
		})
	}
	// A service without sessions answers 404: clients fall back.
	plain := httptest.NewServer(newHandler(t, memory.New()))
	defer plain.Close()
	_, resp, err := websocket.Dial(t.Context(), strings.Replace(plain.URL, "http", "ws", 1)+httpapi.SessionsPath,
		&websocket.DialOptions{Subprotocols: []string{httpapi.SessionSubprotocol}})
	if err == nil || resp == nil || resp.StatusCode != 404 {
		t.Fatalf("sessions off: %v, %+v; want 404", err, resp)
	}
}

// TestSessionLeaseRules: the lease limit per session, REST renew, release
// and transfer of a session-held holding (409 session_held: only its
// session ends it, docs/contract.md §3, §14), a release through the
// session, and a revoke (revoked).
func TestSessionLeaseRules(t *testing.T) {
	in := newSessionInstance(t, memory.New(), session.Config{MaxLeases: 2}, httpapi.Config{})
	w := dial(t, in.srv.URL, "")
	w.open(1000)
	var toks []any
	for _, n := range []string{"a", "b"} {
		w.send("acquire", map[string]any{"name": n, "holder": "h"})
		toks = append(toks, w.expect("result")["lease"].(map[string]any)["fencingToken"])
	}
	w.send("acquire", map[string]any{"name": "c", "holder": "h"})
	if m := w.expect("error"); problemCode(m) != "resource_exhausted" {
		t.Fatalf("third lease: %v", m)
	}
	h := in.srv.Client()
	post := func(path, body string) (*http.Response, map[string]any) {
		t.Helper()
		resp, err := h.Post(in.srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp, m
	}
	if resp, m := post("/v1/leases/a:renew", `{"holder":"h","fencingToken":1,"ttlMs":5000}`); resp.StatusCode != 409 || m["code"] != "session_held" {
		t.Fatalf("REST renew of a session lease: %d %v", resp.StatusCode, m)
	}
	if resp, m := post("/v1/leases/a:acquire", `{"holder":"h","ttlMs":5000}`); resp.StatusCode != 409 || m["code"] != "session_held" {
		t.Fatalf("REST repeat acquire of a session lease: %d %v", resp.StatusCode, m)
	}
	if resp, m := post("/v1/leases/a:release", `{"holder":"h","fencingToken":1}`); resp.StatusCode != 409 || m["code"] != "session_held" {
		t.Fatalf("REST release of a session lease: %d %v; want 409 session_held", resp.StatusCode, m)
	}
	if resp, m := post("/v1/leases/a:transfer", `{"holder":"h","fencingToken":1,"to":"x"}`); resp.StatusCode != 409 || m["code"] != "session_held" {
		t.Fatalf("REST transfer of a session lease: %d %v; want 409 session_held", resp.StatusCode, m)
	}
	w.ackedHeartbeat() // the session holds both still
	w.send("release", map[string]any{"name": "a", "holder": "h", "fencingToken": toks[0]})
	if m := w.expect("result"); m["lease"].(map[string]any)["held"] != false {
		t.Fatalf("release through the session: %v", m)
	}
	if resp, m := post("/v1/leases/b:revoke", `{"reason":"stuck"}`); resp.StatusCode != 200 {
		t.Fatalf("revoke: %d %v", resp.StatusCode, m)
	}
	if m := w.expect("revoked"); m["name"] != "b" || m["reason"] != "stuck" {
		t.Fatalf("after the revoke: %v", m)
	}
	// Both left the session: a new lease fits again.
	w.send("acquire", map[string]any{"name": "c", "holder": "h"})
	if m := w.expect("result"); m["lease"].(map[string]any)["name"] != "c" {
		t.Fatalf("acquire after the losses: %v", m)
	}
	// The session records are hidden from every route.
	resp, err := h.Get(in.srv.URL + "/v1/leases")
	if err != nil {
		t.Fatal(err)
	}
	var page struct{ Leases []map[string]any }
	_ = json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	for _, l := range page.Leases {
		if strings.HasPrefix(l["name"].(string), lease.SessionRecordPrefix) {
			t.Fatalf("list shows the session record %v", l["name"])
		}
	}
	if len(page.Leases) != 3 {
		t.Fatalf("list: %v", page.Leases)
	}
}

// TestSessionProtocolErrors: a message that breaks the protocol ends the
// socket with the design's close codes.
func TestSessionProtocolErrors(t *testing.T) {
	in := newSessionInstance(t, memory.New(), session.Config{MaxMessage: 4096, MessageRate: 20}, httpapi.Config{})
	for _, tc := range []struct {
		name string
		open bool
		send func(w *wsClient)
		code websocket.StatusCode
	}{
		{"malformed JSON", true, func(w *wsClient) { w.raw([]byte(`{"type":`)) }, websocket.StatusPolicyViolation},
		{"unknown type", true, func(w *wsClient) { w.send("dance", nil) }, websocket.StatusPolicyViolation},
		{"missing id", true, func(w *wsClient) { w.raw([]byte(`{"type":"heartbeat"}`)) }, websocket.StatusPolicyViolation},
		{"id out of order", true, func(w *wsClient) { w.raw([]byte(`{"type":"heartbeat","id":1}`)) }, websocket.StatusPolicyViolation},
		{"heartbeat first", false, func(w *wsClient) { w.send("heartbeat", nil) }, websocket.StatusPolicyViolation},
		{"second open", true, func(w *wsClient) { w.send("open", nil) }, websocket.StatusPolicyViolation},
		{"binary frame", true, func(w *wsClient) {
			_ = w.c.Write(t.Context(), websocket.MessageBinary, []byte(`{}`))
		}, websocket.StatusUnsupportedData},
		{"too big", true, func(w *wsClient) { w.raw([]byte(`{"pad":"` + strings.Repeat("x", 5000) + `"}`)) }, websocket.StatusMessageTooBig},
		{"too many messages", true, func(w *wsClient) {
			for i := range 40 { // the service may close the socket before the last
				if w.c.Write(t.Context(), websocket.MessageText, []byte(`{"type":"heartbeat","id":`+strconv.Itoa(i+10)+`}`)) != nil {
					break
				}
			}
		}, websocket.StatusPolicyViolation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := dial(t, in.srv.URL, "")
			if tc.open {
				w.open(1000)
			}
			tc.send(w)
			if code := w.closed(); code != tc.code {
				t.Fatalf("closed with %v, want %v", code, tc.code)
			}
		})
	}
	// A per-request refusal leaves the socket open.
	w := dial(t, in.srv.URL, "")
	w.open(1000)
	w.send("acquire", map[string]any{"name": "bad name", "holder": "h"})
	if m := w.expect("error"); problemCode(m) != "invalid_argument" {
		t.Fatalf("bad name: %v", m)
	}
	w.ackedHeartbeat()
}

// TestSessionYield: a preempting candidate of higher priority makes the
// session push yield (from its renewals); the agent releases, and the
// candidate gets the lease.
func TestSessionYield(t *testing.T) {
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{})
	w := dial(t, in.srv.URL, "")
	w.open(1000)
	w.send("acquire", map[string]any{"name": "y", "holder": "h"})
	tok := w.expect("result")["lease"].(map[string]any)["fencingToken"]
	got := make(chan int, 1)
	go func() {
		resp, err := in.srv.Client().Post(in.srv.URL+"/v1/leases/y:acquire", "application/json",
			strings.NewReader(`{"holder":"better","ttlMs":5000,"waitMs":20000,"priority":5,"preempt":true}`))
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	w.beatUntil(func() bool { return len(w.held) > 0 })
	m := w.next()
	if m["type"] != "yield" || m["name"] != "y" || m["to"] != "better" || m["fencingToken"] != tok {
		t.Fatalf("got %v, want yield to better", m)
	}
	w.send("release", map[string]any{"name": "y", "holder": "h", "fencingToken": tok})
	w.expect("result")
	if code := <-got; code != 200 {
		t.Fatalf("the candidate's acquire: %d", code)
	}
	// Names under the session record prefix are the service's.
	w.send("acquire", map[string]any{"name": session.RecordPrefix + "x", "holder": "h"})
	if m := w.expect("error"); problemCode(m) != "invalid_argument" {
		t.Fatalf("acquire of a reserved name: %v", m)
	}
}

// TestSessionWaitingAcquire: a waiting acquire through a session takes a
// waiting slot of its caller, as over REST, and ends at once with 503 when
// the instance shuts down.
func TestSessionWaitingAcquire(t *testing.T) {
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{Limits: httpapi.Limits{WaitingPerCaller: 1}})
	if _, err := in.m.Acquire(t.Context(), lease.AcquireRequest{Name: "busy", Holder: "other", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	w := dial(t, in.srv.URL, "")
	w.open(1000)
	first := w.send("acquire", map[string]any{"name": "busy", "holder": "h", "waitMs": 30000})
	// The first one waits; wait for it to hold its slot, by the second's answer.
	var second map[string]any
	w.beatUntil(func() bool {
		w.send("acquire", map[string]any{"name": "busy", "holder": "h2", "waitMs": 30000})
		second = w.next()
		return problemCode(second) == "resource_exhausted"
	})
	in.h.CloseStreams()
	m := w.next()
	if m["type"] != "error" || m["re"] != float64(first) || problemCode(m) != "unavailable" {
		t.Fatalf("the waiting acquire on shutdown: %v, want error 503 unavailable", m)
	}
}
