package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
)

// scriptedMsg is a message scriptedSessions got, and its socket.
type scriptedMsg struct {
	ws *websocket.Conn
	m  map[string]any
	// gone is closed when the socket's read loop ends (the client dropped
	// it).
	gone chan struct{}
}

// scriptedSessions is a session route that answers open and close by
// itself and hands every resume to the test, which answers it (or not).
func scriptedSessions(t *testing.T) (*httptest.Server, chan scriptedMsg) {
	t.Helper()
	resumes := make(chan scriptedMsg, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{sessionProtocol}})
		if err != nil {
			return
		}
		gone := make(chan struct{})
		defer close(gone)
		defer ws.CloseNow()
		for {
			var m map[string]any
			if err := wsjson.Read(context.Background(), ws, &m); err != nil {
				return
			}
			switch m["type"] {
			case "open":
				_ = wsjson.Write(context.Background(), ws, map[string]any{"type": "opened", "re": m["id"], "sessionId": "s", "epoch": 1,
					"windowMs": 1000, "heartbeatMs": 250, "leaseTtlMs": 30000})
			case "close":
				_ = wsjson.Write(context.Background(), ws, map[string]any{"type": "closed", "re": m["id"]})
			case "resume":
				resumes <- scriptedMsg{ws, m, gone}
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv, resumes
}

// TestSessionResumeWhileOneIsInFlight (docs/contract.md §14, A1 and A2): a
// resume started while another is unanswered proposes a higher epoch, and
// from the moment it is sent its socket is the current one: the earlier
// resume's resumed, arriving afterwards, is ignored and its socket
// dropped; the later one's is taken.
func TestSessionResumeWhileOneIsInFlight(t *testing.T) {
	srv, resumes := scriptedSessions(t)
	c, err := New(srv.URL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.OpenSession(t.Context(), SessionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	}()
	type result struct {
		sc  *sconn
		err error
	}
	resume := func() (chan result, scriptedMsg) {
		ch := make(chan result, 1)
		go func() {
			sc, err := s.connect(t.Context(), true)
			ch <- result{sc, err}
		}()
		return ch, <-resumes
	}
	first, r1 := resume()
	second, r2 := resume()
	if r1.m["epoch"] != 2.0 || r2.m["epoch"] != 3.0 {
		t.Fatalf("resumes propose epochs %v then %v, want 2 then 3", r1.m["epoch"], r2.m["epoch"])
	}
	answer := func(r scriptedMsg) {
		_ = wsjson.Write(context.Background(), r.ws, map[string]any{"type": "resumed", "re": r.m["id"], "sessionId": "s", "epoch": r.m["epoch"],
			"windowMs": 1000, "heartbeatMs": 250, "leaseTtlMs": 30000, "leases": []any{}, "lost": []any{}})
	}
	answer(r1) // the earlier resume's answer arrives after the later one was sent
	if res := <-first; res.err == nil {
		t.Fatal("the earlier resume's answer was taken after a later resume went out")
	}
	select {
	case <-r1.gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the earlier resume's socket was not dropped")
	}
	answer(r2)
	res := <-second
	if res.err != nil {
		t.Fatalf("the later resume: %v", res.err)
	}
	s.setConn(res.sc)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != 3 || s.latest != res.sc {
		t.Fatalf("epoch %d, latest is the later resume's socket: %v; want 3, true", s.epoch, s.latest == res.sc)
	}
}
