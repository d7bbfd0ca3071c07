package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// fakeSessions is a hand-written session route (docs/contract.md §14) that
// speaks the wire protocol just enough to test the client against:
// subprotocol leasesvc.session.v2 (v1 is accepted, its resume refused),
// open, resume (proposing an epoch above the session's, else 409
// session_conflict naming it; the claims taken over or reported lost),
// heartbeat (acknowledged while acks is set and the socket's session lives
// at its epoch), acquire, renew, release, transfer (503 unavailable once
// the session ended on the socket: moved by a later resume, or closed) and
// close, one holding per lease, with pushes and socket drops at the test's
// command. A refused open or resume closes the socket with 1008. It is not
// the real service.
type fakeSessions struct {
	*httptest.Server
	status atomic.Int32 // when not 0, the answer to every upgrade
	acks   atomic.Bool  // heartbeats are acknowledged
	refuse atomic.Bool  // resumes are refused: session_not_found
	// holdAcquires and holdReleases keep the answers to acquires, and to
	// releases and transfers (in held), until flush; what they do is done.
	holdAcquires, holdReleases atomic.Bool
	// stallResumes keeps resumes (in stalled), undone and unanswered,
	// until answerStalled.
	stallResumes atomic.Bool
	// endOnRelease: the next release or transfer finds the session ended on
	// its socket: it is answered 503 unavailable, and the socket closed
	// (1000), as the service does when a session moved.
	endOnRelease atomic.Bool
	// dropOnRelease: the next release or transfer is done, and its socket
	// closed before the answer.
	dropOnRelease atomic.Bool

	mu      sync.Mutex
	sockets []*fakeSocket
	ids     int
	known   map[string]*fakeSession // by session id
	leases  map[string]*fakeHolding // by lease name
	changed chan struct{}           // closed and replaced on every message and socket
	held    []heldAnswer            // answers kept while holdAcquires or holdReleases
	stalled []heldAnswer            // resumes kept while stallResumes (m is the resume)
	resumes []fakeResume            // every resume and its outcome, in order of arrival
}

// fakeSession is a session the fake knows.
type fakeSession struct {
	epoch int64
	ended bool // closed
}

// fakeResume is a resume the fake took, and its answer's type and code.
type fakeResume struct {
	epoch     int64
	typ, code string
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
	v1     bool             // it speaks leasesvc.session.v1
	msgs   []map[string]any // guarded by f.mu
	closed bool             // its read loop ended; guarded by f.mu
	// sid and epoch are the session the socket opened or resumed and the
	// epoch it did at; ended is set when the session ended on it. Guarded
	// by f.mu.
	sid   string
	epoch int64
	ended bool
}

// live reports whether the socket's session lives on it: opened or
// resumed there, not ended, not moved to a later epoch; f.mu is held.
func (s *fakeSocket) live() bool {
	fs := s.f.known[s.sid]
	return s.sid != "" && !s.ended && fs != nil && !fs.ended && fs.epoch == s.epoch
}

func newFakeSessions(t testing.TB) *fakeSessions {
	t.Helper()
	f := &fakeSessions{known: map[string]*fakeSession{}, leases: map[string]*fakeHolding{}, changed: make(chan struct{})}
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
	offered := r.Header.Values("Sec-WebSocket-Protocol")
	if !strings.Contains(strings.Join(offered, ","), "leasesvc.session.v") {
		problem(w, 400, "invalid_argument", nil)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"leasesvc.session.v2", "leasesvc.session.v1"}})
	if err != nil {
		return
	}
	s := &fakeSocket{f: f, ws: ws, v1: ws.Subprotocol() == "leasesvc.session.v1"}
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
		letGo := m["type"] == "release" || m["type"] == "transfer"
		if m["type"] == "resume" && f.stallResumes.Load() {
			f.stalled = append(f.stalled, heldAnswer{s, m})
			f.mu.Unlock()
			continue
		}
		if letGo && f.endOnRelease.CompareAndSwap(true, false) {
			s.ended = true
		}
		answer, shut := f.answer(s, m)
		drop := letGo && f.dropOnRelease.CompareAndSwap(true, false)
		switch {
		case drop:
			answer = nil
		case m["type"] == "acquire" && f.holdAcquires.Load(), letGo && f.holdReleases.Load():
			f.held = append(f.held, heldAnswer{s, answer})
			answer = nil
		}
		if letGo && s.ended {
			shut = websocket.StatusNormalClosure // the session moved off this socket
		}
		f.mu.Unlock()
		if answer != nil {
			s.send(answer)
		}
		switch {
		case drop:
			return
		case shut != 0:
			_ = ws.Close(shut, "")
			return
		}
	}
}

// answerStalled does the resumes kept while stallResumes, as if they
// arrived now, and answers each on its socket (if it is still open).
func (f *fakeSessions) answerStalled() {
	f.mu.Lock()
	stalled := f.stalled
	f.stalled = nil
	type out struct {
		s    *fakeSocket
		m    map[string]any
		shut websocket.StatusCode
	}
	var outs []out
	for _, h := range stalled {
		a, shut := f.answer(h.s, h.m)
		outs = append(outs, out{h.s, a, shut})
	}
	f.mu.Unlock()
	for _, o := range outs {
		o.s.send(o.m)
		if o.shut != 0 {
			_ = o.s.ws.Close(o.shut, "")
		}
	}
}

// bumpEpoch sets every session the fake knows at epoch e, as if resumes
// the test does not see took it there.
func (f *fakeSessions) bumpEpoch(e int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fs := range f.known {
		fs.epoch = e
	}
}

// signal wakes the waiters; f.mu is held.
func (f *fakeSessions) signal() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// answer is the fake's answer to m on s, or nil, and the status to close
// s with after it (0: none); f.mu is held.
func (f *fakeSessions) answer(s *fakeSocket, m map[string]any) (map[string]any, websocket.StatusCode) {
	id := m["id"]
	str := func(k string) string { v, _ := m[k].(string); return v }
	num := func(mm map[string]any, k string) int64 { v, _ := mm[k].(float64); return int64(v) }
	tok := func() int64 { return num(m, "fencingToken") }
	opened := func(typ, sid string, epoch int64) map[string]any {
		return map[string]any{"type": typ, "re": id, "sessionId": sid, "epoch": epoch, "windowMs": 1000, "heartbeatMs": 250, "leaseTtlMs": 30000}
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
		f.known[sid] = &fakeSession{epoch: 1}
		s.sid, s.epoch = sid, 1
		return opened("opened", sid, 1), 0
	case "resume":
		a, code := f.resume(s, m, opened, fail)
		typ := a["type"].(string)
		f.resumes = append(f.resumes, fakeResume{epoch: num(m, "epoch"), typ: typ, code: code})
		if typ == "error" {
			return a, websocket.StatusPolicyViolation
		}
		return a, 0
	case "heartbeat":
		if f.acks.Load() && s.live() {
			return map[string]any{"type": "ack", "re": id}, 0
		}
		return nil, 0
	case "acquire", "renew", "release", "transfer":
		if !s.live() {
			a := fail(503, "unavailable")
			a["problem"].(map[string]any)["detail"] = "the session ended on this socket (moved, expired or closed): resume, and retry through the resumed session"
			return a, 0
		}
	}
	switch m["type"] {
	case "acquire":
		switch {
		case l == nil || !l.held:
			if l == nil {
				l = &fakeHolding{}
				f.leases[name] = l
			}
			l.holder, l.token, l.held = str("holder"), l.token+1, true
		case l.holder != str("holder"):
			return fail(409, "lease_held"), 0
		}
		return result(), 0
	case "renew", "release", "transfer":
		if l == nil || !l.held || l.holder != str("holder") || l.token != tok() {
			return fail(409, "lease_lost"), 0
		}
		if cp, ok := m["checkpoint"]; ok {
			l.cp, _ = json.Marshal(cp)
		}
		if m["type"] != "renew" {
			l.held = false
		}
		return result(), 0
	case "close":
		for _, l := range f.leases {
			l.held = false
		}
		if fs := f.known[s.sid]; fs != nil {
			fs.ended = true
		}
		return map[string]any{"type": "closed", "re": id}, websocket.StatusNormalClosure
	}
	return nil, 0
}

// resume takes the session of m over at the epoch m proposes (the
// service's S1), or refuses; it returns the answer and its code; f.mu is
// held.
func (f *fakeSessions) resume(s *fakeSocket, m map[string]any, opened func(string, string, int64) map[string]any, fail func(int, string) map[string]any) (map[string]any, string) {
	sid, _ := m["sessionId"].(string)
	epoch, isNum := m["epoch"].(float64)
	fs := f.known[sid]
	switch {
	case s.v1, !isNum, epoch < 1, epoch != float64(int64(epoch)):
		a := fail(400, "invalid_argument")
		a["problem"].(map[string]any)["errors"] = []any{map[string]any{"field": "epoch", "detail": "required"}}
		return a, "invalid_argument"
	case f.refuse.Load(), fs == nil, fs.ended:
		return fail(404, "session_not_found"), "session_not_found"
	case int64(epoch) <= fs.epoch:
		a := fail(409, "session_conflict")
		a["problem"].(map[string]any)["epoch"] = fs.epoch
		return a, "session_conflict"
	}
	fs.epoch = int64(epoch)
	s.sid, s.epoch = sid, int64(epoch)
	leases, lost := []any{}, []any{}
	claims, _ := m["leases"].([]any)
	for _, c := range claims {
		c, _ := c.(map[string]any)
		name, _ := c["name"].(string)
		holder, _ := c["holder"].(string)
		token, _ := c["fencingToken"].(float64)
		l := f.leases[name]
		if l == nil || l.holder != holder || l.token != int64(token) {
			lost = append(lost, map[string]any{"name": name, "fencingToken": token, "reason": "taken"})
			continue
		}
		// Held, or ended while nobody acquired since: it is the session's
		// again (docs/contract.md §14, Resume).
		l.held = true
		leases = append(leases, f.wire(name, l))
	}
	a := opened("resumed", sid, int64(epoch))
	a["leases"], a["lost"] = leases, lost
	return a, ""
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
