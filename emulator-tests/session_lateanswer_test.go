package emulatortests

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/wire"
)

// The black-box check of issue 44's first finding (docs/contract.md §14,
// S5 and S6), on the real binary: two instances on one backend, the first
// (the late one) reaching it through a proxy that holds back every answer
// of the backend lateAnswerDelay on its way back, requests untouched, both
// with LEASESVC_SESSION_LEASE_TTL=1s. An agent (a raw WebSocket client of
// the test's own, lateSocket) opens a session of window 200 ms on the late
// instance and acquires a lease through it: the backend decides at once,
// and its answer reaches the instance past the session lease TTL. Once the
// agent's holding shows in the backend (read through the other instance),
// a candidate acquires the lease by REST through the other instance,
// waiting. On the test's monotonic clock:
//
//   - no `result` for a holding of the lease arrives on the agent's socket
//     after the candidate was answered a higher token, nor after the
//     candidate's holding began (its acquireTime: one machine's clock): an
//     instance never hands out a holding that is not safe for a window (S5);
//   - no `lost` or `revoked` about a holding comes before its `result` on
//     the socket (S6).
//
// Before S5 and S6 the `result` for token 1 reached the agent 1.6 s after
// the candidate had been answered token 2, on both backends.

// The timings of the check: the session lease TTL (the instances'), the
// session's window, and how long the late instance's proxy holds back each
// answer of the backend.
const (
	lateAnswerTTL    = time.Second
	lateAnswerWindow = 200 * time.Millisecond
	lateAnswerDelay  = 1600 * time.Millisecond
)

// lateAnswerSetup is one backend of the check.
type lateAnswerSetup struct {
	backend string
	// upstream is the backend's host:port, hostEnv the variable through
	// which an instance finds it, value (if set) its value for an address.
	upstream, hostEnv string
	value             func(addr string) string
	// env is both instances' environment, besides hostEnv.
	env map[string]string
}

// TestSessionLateAnswerPostgres runs the check on a throwaway PostgreSQL.
func TestSessionLateAnswerPostgres(t *testing.T) {
	t.Parallel()
	c := pgtest.Start(t)
	migrate := e2e.StartService(t, postgresServiceEnv(c, "LEASESVC_POSTGRES_MIGRATE", "true"))
	stopCleanly(t, migrate)
	runLateAnswer(t, lateAnswerSetup{
		backend: "postgres", upstream: fmt.Sprintf("127.0.0.1:%d", c.Port), hostEnv: "LEASESVC_POSTGRES_URL",
		value: func(addr string) string { return "postgres://postgres@" + addr + "/postgres?sslmode=disable" },
		env:   map[string]string{"LEASESVC_BACKEND": "postgres"},
	})
}

// TestSessionLateAnswerFirestore runs the check on the Firestore emulator,
// the late instance reaching its gRPC port through the proxy.
func TestSessionLateAnswerFirestore(t *testing.T) {
	t.Parallel()
	env := firestoreServiceEnv(t)
	upstream := env[emulators.FirestoreHostEnv]
	delete(env, emulators.FirestoreHostEnv)
	runLateAnswer(t, lateAnswerSetup{backend: "firestore", upstream: upstream, hostEnv: emulators.FirestoreHostEnv, env: env})
}

func runLateAnswer(t *testing.T, s lateAnswerSetup) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "late-"+s.backend, "127.0.0.1:0", s.upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("start the proxy: %v", err)
	}
	t.Cleanup(p.Stop)
	envOf := func(addr string) map[string]string {
		env := maps.Clone(s.env)
		env[s.hostEnv] = addr
		if s.value != nil {
			env[s.hostEnv] = s.value(addr)
		}
		env["LEASESVC_SESSION_LEASE_TTL"] = lateAnswerTTL.String()
		env["LEASESVC_LOG_LEVEL"] = "warn"
		return env
	}
	late := e2e.StartService(t, envOf(p.Listen))
	other := e2e.StartService(t, envOf(s.upstream))
	name := e2e.UniqueName("lateanswer")

	// The session is opened before the answers are held back (opening
	// writes its record); it heartbeats every window/4 from then on.
	sock := dialLateSocket(t, late.URL)
	openID := sock.send(t, map[string]any{"type": "open", "windowMs": lateAnswerWindow.Milliseconds()})
	opened, ok := sock.await(30*time.Second, func(m socketMsg) bool { return m.Re == openID })
	if !ok || opened.Type != "opened" {
		t.Fatalf("open: %s (socket: %v)", opened.Raw, sock.closed())
	}
	if opened.LeaseTTLMs != lateAnswerTTL.Milliseconds() || opened.WindowMs != lateAnswerWindow.Milliseconds() {
		t.Fatalf("opened %s: want leaseTtlMs %d and windowMs %d", opened.Raw, lateAnswerTTL.Milliseconds(), lateAnswerWindow.Milliseconds())
	}
	go sock.heartbeat(t.Context(), lateAnswerWindow/4)
	spec := fmt.Sprintf(`{"name":"late","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, lateAnswerDelay.Milliseconds())
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		t.Fatalf("hold back the backend's answers: %v", err)
	}

	sent := time.Now()
	acqID := sock.send(t, map[string]any{"type": "acquire", "name": name, "holder": "agent"})
	// The backend decided the agent's acquire once the other instance reads
	// its holding; then the candidate asks there.
	cl := e2e.Client{URL: other.URL}
	var agentToken int64
	if !faultPoll(t.Context(), 60*time.Second, func() bool {
		// Each of the transaction's answers comes 1.6 s late: on a loaded
		// machine the acquire can run out of its 10 s (504) or be refused
		// as unsafe (503) before it commits. It is sent again then.
		for _, m := range sock.messages() {
			if m.Re == acqID && m.Type == "error" {
				acqID = sock.send(t, map[string]any{"type": "acquire", "name": name, "holder": "agent"})
				break
			}
		}
		r := cl.Get(t, "/v1/leases/"+name)
		agentToken = r.Token()
		return r.Status == http.StatusOK && r.Holder() == "agent"
	}) {
		t.Fatalf("the agent's holding of %s never showed through the other instance; the socket:%s\nthe late instance's log:\n%s", name, sock.dump(sent), late.Output())
	}
	shown := time.Now()
	r := cl.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"candidate","ttlMs":30000,"waitMs":10000}`)
	answered := time.Now()
	if r.Status != http.StatusOK || r.Holder() != "candidate" || r.Token() <= agentToken {
		t.Fatalf("the candidate's acquire = %d %s; want the lease held by it past the agent's token %d (the check needs the holding taken while the agent's answer is held back)",
			r.Status, r.Raw, agentToken)
	}
	var begun time.Time
	if at, ok := r.Lease()["acquireTime"].(string); ok {
		begun, _ = time.Parse(time.RFC3339Nano, at)
	}

	ans, ok := sock.await(20*time.Second, func(m socketMsg) bool { return m.Re == acqID })
	if !ok {
		t.Fatalf("the agent's acquire was not answered within 20s (socket: %v)", sock.closed())
	}
	t.Logf("%s: agent's holding token %d read through the other instance at +%v; candidate answered token %d at +%v (began %s); agent's acquire answered at +%v: %s",
		s.backend, agentToken, shown.Sub(sent).Round(time.Millisecond), r.Token(), answered.Sub(sent).Round(time.Millisecond),
		begun.UTC().Format("15:04:05.000000"), ans.At.Sub(sent).Round(time.Millisecond), ans.Raw)
	sock.logMessages(t, sent)
	for _, v := range lateAnswerViolations(sock.messages(), name, r.Token(), answered, begun) {
		t.Error(v)
	}
}

// lateAnswerViolations checks the messages of the agent's socket, in the
// order they arrived: a `result` for a holding of name below token (the
// candidate's, answered at answered, begun at begun) that arrived after
// either (S5), and a `lost` or `revoked` of a holding before its `result`
// (S6).
func lateAnswerViolations(msgs []socketMsg, name string, token int64, answered, begun time.Time) []string {
	var out []string
	gone := map[int64]socketMsg{} // the losses pushed so far, by token
	for _, m := range msgs {
		switch {
		case (m.Type == "lost" || m.Type == "revoked") && m.Name == name:
			if _, ok := gone[m.FencingToken]; !ok {
				gone[m.FencingToken] = m
			}
		case m.Type == "result" && m.Lease != nil && m.Lease.Name == name:
			t := m.Lease.FencingToken
			if l, ok := gone[t]; ok {
				out = append(out, fmt.Sprintf("%s came before the result for %s token %d on the socket (at %s, the result at %s): a push about a holding must follow its answer (S6)",
					l.Raw, name, t, clock(l.At), clock(m.At)))
			}
			switch {
			case t < token && m.At.After(answered):
				out = append(out, fmt.Sprintf("the result for %s token %d reached the agent at %s, %v after the candidate on the other instance had been answered token %d: an instance must not hand out a holding that is not safe (S5)",
					name, t, clock(m.At), m.At.Sub(answered).Round(time.Millisecond), token))
			case t < token && !begun.IsZero() && m.At.After(begun):
				out = append(out, fmt.Sprintf("the result for %s token %d reached the agent at %s, %v after the candidate's holding of token %d began: an instance must not hand out a holding that is not safe (S5)",
					name, t, clock(m.At), m.At.Sub(begun).Round(time.Millisecond), token))
			}
		}
	}
	return out
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

// socketMsg is one message the service sent on a lateSocket, with when it
// arrived, as the test reads it (not rawsession's: this check must not
// depend on the client it may be used to test).
type socketMsg struct {
	At  time.Time
	Raw string

	Type         string      `json:"type"`
	Re           int64       `json:"re"`
	Name         string      `json:"name"`
	FencingToken int64       `json:"fencingToken"`
	WindowMs     int64       `json:"windowMs"`
	LeaseTTLMs   int64       `json:"leaseTtlMs"`
	Lease        *wire.Lease `json:"lease"`
}

// lateSocket is a minimal session client: one socket, messages sent with
// increasing ids, every message received kept in order with its arrival.
type lateSocket struct {
	ws *websocket.Conn

	writeMu sync.Mutex
	nextID  int64

	mu      sync.Mutex
	msgs    []socketMsg
	changed chan struct{} // closed (and replaced) when a message arrives
	done    chan struct{} // closed when the socket ends
	err     error
}

func dialLateSocket(t *testing.T, base string) *lateSocket {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, strings.Replace(base, "http", "ws", 1)+"/v1/sessions:connect",
		&websocket.DialOptions{Subprotocols: []string{"leasesvc.session.v2"}})
	if err != nil {
		t.Fatalf("dial the session route: %v", err)
	}
	s := &lateSocket{ws: ws, changed: make(chan struct{}), done: make(chan struct{})}
	go s.read()
	t.Cleanup(func() { _ = ws.CloseNow() })
	return s
}

func (s *lateSocket) read() {
	var err error
	for {
		var raw []byte
		if _, raw, err = s.ws.Read(context.Background()); err != nil {
			break
		}
		m := socketMsg{At: time.Now(), Raw: string(raw)}
		if err = json.Unmarshal(raw, &m); err != nil {
			break
		}
		s.mu.Lock()
		s.msgs = append(s.msgs, m)
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	close(s.done)
}

// send sends m with the next id and returns the id.
func (s *lateSocket) send(t *testing.T, m map[string]any) int64 {
	id, err := s.write(t.Context(), m)
	if err != nil {
		t.Fatalf("send %v: %v", m["type"], err)
	}
	return id
}

func (s *lateSocket) write(ctx context.Context, m map[string]any) (int64, error) {
	s.writeMu.Lock() // ids increase along the socket
	defer s.writeMu.Unlock()
	s.nextID++
	m["id"] = s.nextID
	raw, err := json.Marshal(m)
	if err != nil {
		return 0, err
	}
	return s.nextID, s.ws.Write(ctx, websocket.MessageText, raw)
}

// heartbeat sends a heartbeat every beat until ctx or the socket ends.
func (s *lateSocket) heartbeat(ctx context.Context, beat time.Duration) {
	tick := time.NewTicker(beat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-tick.C:
			if _, err := s.write(ctx, map[string]any{"type": "heartbeat"}); err != nil {
				return
			}
		}
	}
}

// await returns the first message that satisfies pred, waiting at most
// limit for it; false if none came before then or before the socket ended.
func (s *lateSocket) await(limit time.Duration, pred func(socketMsg) bool) (socketMsg, bool) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for seen := 0; ; {
		s.mu.Lock()
		for ; seen < len(s.msgs); seen++ {
			if pred(s.msgs[seen]) {
				m := s.msgs[seen]
				s.mu.Unlock()
				return m, true
			}
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-s.done:
			s.mu.Lock()
			n := len(s.msgs)
			s.mu.Unlock()
			if seen == n {
				return socketMsg{}, false
			}
		case <-timer.C:
			return socketMsg{}, false
		}
	}
}

// closed returns why the socket ended, or "open".
func (s *lateSocket) closed() string {
	select {
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return fmt.Sprintf("closed: %v", s.err)
	default:
		return "open"
	}
}

func (s *lateSocket) messages() []socketMsg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]socketMsg(nil), s.msgs...)
}

// logMessages logs every message but the acks (counted), relative to from.
func (s *lateSocket) logMessages(t *testing.T, from time.Time) {
	t.Logf("the agent's socket, relative to its acquire:%s", s.dump(from))
}

// dump returns every message but the acks (counted), relative to from.
func (s *lateSocket) dump(from time.Time) string {
	var b strings.Builder
	acks := 0
	for _, m := range s.messages() {
		if m.Type == "ack" {
			acks++
			continue
		}
		fmt.Fprintf(&b, "\n  %s (+%v) %s", clock(m.At), m.At.Sub(from).Round(time.Millisecond), m.Raw)
	}
	fmt.Fprintf(&b, "\n  (and %d acks)", acks)
	return b.String()
}
