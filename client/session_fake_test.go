package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// fakeSessions is a hand-written session route (docs/contract.md §14) that
// speaks the wire protocol just enough to test the client against: open,
// resume, heartbeat (acknowledged while acks is set), acquire, renew,
// release, transfer and close of leases, one holding per lease, with
// pushes and socket drops at the test's command. It is not the real
// service.
type fakeSessions struct {
	*httptest.Server
	status atomic.Int32 // when not 0, the answer to every upgrade
	acks   atomic.Bool  // heartbeats are acknowledged
	refuse atomic.Bool  // resumes are refused: session_not_found
	// holdAcquires keeps the answers to acquires (in held) until flush.
	holdAcquires atomic.Bool
	// stallResumes leaves resumes unanswered.
	stallResumes atomic.Bool

	mu      sync.Mutex
	sockets []*fakeSocket
	ids     int
	known   map[string]bool         // session ids
	leases  map[string]*fakeHolding // by lease name
	changed chan struct{}           // closed and replaced on every message and socket
	held    []heldAnswer            // answers kept while holdAcquires
}

// heldAnswer is an answer the fake keeps back, and the socket it is for.
type heldAnswer struct {
	s *fakeSocket
	m map[string]any
}

// flush sends the answers kept back, each on the socket its request came
// on.
func (f *fakeSessions) flush() {
	f.mu.Lock()
	held := f.held
	f.held = nil
	f.mu.Unlock()
	for _, h := range held {
		h.s.send(h.m)
	}
}

// fakeHolding is a lease the fake holds for a session.
type fakeHolding struct {
	holder string
	token  int64
	held   bool
	cp     json.RawMessage
}

// fakeSocket is one socket the fake accepted, and every message it got.
type fakeSocket struct {
	f      *fakeSessions
	ws     *websocket.Conn
	msgs   []map[string]any // guarded by f.mu
	closed bool             // its read loop ended; guarded by f.mu
}

func newFakeSessions(t testing.TB) *fakeSessions {
	t.Helper()
	f := &fakeSessions{known: map[string]bool{}, leases: map[string]*fakeHolding{}, changed: make(chan struct{})}
	f.acks.Store(true)
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.mu.Lock()
		socks := f.sockets
		f.mu.Unlock()
		for _, s := range socks {
			_ = s.ws.CloseNow()
		}
		f.CloseClientConnections()
		f.Close()
	})
	return f
}

func (f *fakeSessions) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/sessions:connect" {
		problem(w, 404, "not_found", nil)
		return
	}
	if st := int(f.status.Load()); st != 0 {
		code := map[int]string{401: "unauthenticated", 405: "method_not_allowed", 501: "unimplemented"}[st]
		problem(w, st, code, nil)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"leasesvc.session.v1"}})
	if err != nil {
		return
	}
	s := &fakeSocket{f: f, ws: ws}
	f.mu.Lock()
	f.sockets = append(f.sockets, s)
	f.signal()
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		s.closed = true
		f.signal()
		f.mu.Unlock()
		_ = ws.CloseNow()
	}()
	for {
		_, b, err := ws.Read(context.Background())
		if err != nil {
			return
		}
		var m map[string]any
		if json.Unmarshal(b, &m) != nil {
			return
		}
		f.mu.Lock()
		if m["type"] == "resume" { // for make-before-break: the sockets still open then
			open := 0
			for _, o := range f.sockets {
				if o != s && !o.closed {
					open++
				}
			}
			m["othersOpen"] = open
		}
		s.msgs = append(s.msgs, m)
		f.signal()
		answer := f.answer(m)
		switch {
		case m["type"] == "acquire" && f.holdAcquires.Load():
			f.held = append(f.held, heldAnswer{s, answer})
			answer = nil
		case m["type"] == "resume" && f.stallResumes.Load():
			answer = nil
		}
		f.mu.Unlock()
		if answer != nil {
			s.send(answer)
		}
		if m["type"] == "close" {
			_ = ws.Close(websocket.StatusNormalClosure, "")
			return
		}
	}
}

// signal wakes the waiters; f.mu is held.
func (f *fakeSessions) signal() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// answer is the fake's answer to m, or nil; f.mu is held.
func (f *fakeSessions) answer(m map[string]any) map[string]any {
	id := m["id"]
	str := func(k string) string { v, _ := m[k].(string); return v }
	tok := func() int64 { v, _ := m["fencingToken"].(float64); return int64(v) }
	opened := func(typ, sid string) map[string]any {
		return map[string]any{"type": typ, "re": id, "sessionId": sid, "epoch": 1, "windowMs": 1000, "heartbeatMs": 250, "leaseTtlMs": 30000}
	}
	fail := func(status int, code string) map[string]any {
		return map[string]any{"type": "error", "re": id, "problem": map[string]any{"type": "urn:leasesvc:problem:" + code, "title": code, "status": status, "code": code}}
	}
	name := str("name")
	l := f.leases[name]
	result := func() map[string]any {
		return map[string]any{"type": "result", "re": id, "lease": f.wire(name, l)}
	}
	switch m["type"] {
	case "open":
		f.ids++
		sid := "session-" + string(rune('a'+f.ids))
		f.known[sid] = true
		return opened("opened", sid)
	case "resume":
		if f.refuse.Load() || !f.known[str("sessionId")] {
			return fail(404, "session_not_found")
		}
		a := opened("resumed", str("sessionId"))
		a["leases"], a["lost"] = []any{}, []any{}
		return a
	case "heartbeat":
		if f.acks.Load() {
			return map[string]any{"type": "ack", "re": id}
		}
		return nil
	case "acquire":
		switch {
		case l == nil || !l.held:
			if l == nil {
				l = &fakeHolding{}
				f.leases[name] = l
			}
			l.holder, l.token, l.held = str("holder"), l.token+1, true
		case l.holder != str("holder"):
			return fail(409, "lease_held")
		}
		return result()
	case "renew", "release", "transfer":
		if l == nil || !l.held || l.holder != str("holder") || l.token != tok() {
			return fail(409, "lease_lost")
		}
		if cp, ok := m["checkpoint"]; ok {
			l.cp, _ = json.Marshal(cp)
		}
		if m["type"] != "renew" {
			l.held = false
		}
		return result()
	case "close":
		for _, l := range f.leases {
			l.held = false
		}
		return map[string]any{"type": "closed", "re": id}
	}
	return nil
}

// wire is a lease's JSON as the service answers it.
func (f *fakeSessions) wire(name string, l *fakeHolding) map[string]any {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	exp := now
	if l.held {
		exp = now.Add(30 * time.Second)
	}
	w := map[string]any{"name": name, "holder": l.holder, "fencingToken": l.token, "ttlMs": 30000,
		"acquireTime": now, "renewTime": now, "expireTime": exp, "held": l.held, "serverTime": now,
		"transitions": l.token, "metadata": map[string]any{}, "session": true, "sessionWindowMs": 1000}
	if l.cp != nil {
		w["checkpoint"], w["checkpointToken"] = l.cp, l.token
	}
	return w
}

// send sends m on the socket.
func (s *fakeSocket) send(m map[string]any) {
	b, _ := json.Marshal(m)
	_ = s.ws.Write(context.Background(), websocket.MessageText, b)
}

// await waits (real time, briefly) until cond holds of the fake's state,
// which it reads with f.mu held.
func (f *fakeSessions) await(t testing.TB, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		ok, ch := cond(), f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// socket returns the i-th socket accepted, waiting for it.
func (f *fakeSessions) socket(t testing.TB, i int) *fakeSocket {
	t.Helper()
	f.await(t, "a socket", func() bool { return len(f.sockets) > i })
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sockets[i]
}

// messages returns the messages of type typ the socket got so far.
func (s *fakeSocket) messages(typ string) []map[string]any {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	var ms []map[string]any
	for _, m := range s.msgs {
		if m["type"] == typ {
			ms = append(ms, m)
		}
	}
	return ms
}

// count returns, with f.mu held, how many messages of type typ the socket
// got.
func (s *fakeSocket) count(typ string) int {
	n := 0
	for _, m := range s.msgs {
		if m["type"] == typ {
			n++
		}
	}
	return n
}
