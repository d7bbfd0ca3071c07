package rawsession_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/internal/rawsession"
	"github.com/leasesvc/leasesvc/lease"
)

// oldOrder is a session route that answers in the orders an instance of
// before docs/contract.md §14 S5 and S6 could: every heartbeat acked, and
// an acquire answered by lostFirst then its result (lost L/1, result L/1),
// or its result alone after late; once a late result is sent no heartbeat
// is acked (the lease in its table is not safe for a window).
type oldOrder struct {
	lostFirst bool
	late      time.Duration
}

func (o oldOrder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{rawsession.Subprotocol}})
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ctx := r.Context()
	send := func(m map[string]any) {
		b, _ := json.Marshal(m)
		_ = ws.Write(ctx, websocket.MessageText, b)
	}
	var mu sync.Mutex // an ack's check and write, and a late result's, in one order
	answered := false
	for {
		_, raw, err := ws.Read(ctx)
		if err != nil {
			return
		}
		var m struct {
			Type, Name, Holder string
			ID                 int64
		}
		_ = json.Unmarshal(raw, &m)
		switch m.Type {
		case "open":
			send(map[string]any{"type": "opened", "re": m.ID, "sessionId": "s", "epoch": 1, "windowMs": 200, "heartbeatMs": 50, "leaseTtlMs": 1000})
		case "heartbeat":
			mu.Lock()
			if !answered {
				send(map[string]any{"type": "ack", "re": m.ID})
			}
			mu.Unlock()
		case "acquire":
			now := time.Now().UTC()
			l := map[string]any{"name": m.Name, "holder": m.Holder, "fencingToken": 1, "held": true, "ttlMs": 1000,
				"acquireTime": now, "renewTime": now, "expireTime": now.Add(time.Second), "serverTime": now}
			go func(id int64) {
				if o.lostFirst {
					send(map[string]any{"type": "lost", "name": m.Name, "fencingToken": 1, "reason": "taken"})
				}
				time.Sleep(o.late)
				mu.Lock()
				answered = o.late > 0
				send(map[string]any{"type": "result", "re": id, "lease": l})
				mu.Unlock()
			}(m.ID)
		}
	}
}

func openOn(t *testing.T, h http.Handler) *rawsession.Agent {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	a := &rawsession.Agent{URLs: []string{srv.URL}, Window: 200 * time.Millisecond}
	if _, err := a.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Kill)
	return a
}

// TestLostBeforeResultIsNotLed: lost L/1 read while the acquire of L is in
// flight, then result L/1: the acquire is lost and L is not led (A5).
func TestLostBeforeResultIsNotLed(t *testing.T) {
	a := openOn(t, oldOrder{lostFirst: true})
	_, err := a.Acquire(context.Background(), "svc.a", "agent", 0)
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("acquire answered after its lost: %v (held %v); want lease.ErrLost", err, a.Held())
	}
	if d := a.LeaseDeadline("svc.a"); !d.IsZero() {
		t.Fatalf("svc.a led until %v after its lost", d)
	}
}

// TestLateResultIsCappedByItsOwnWrite: a result read 1.2s after its
// acquire was sent (lease TTL 1s), while acks kept coming, is led no later
// than the send + 0.9s until an ack is read after it (A4).
func TestLateResultIsCappedByItsOwnWrite(t *testing.T) {
	a := openOn(t, oldOrder{late: 1200 * time.Millisecond})
	if _, err := a.Acquire(context.Background(), "svc.a", "agent", 0); err != nil {
		t.Fatal(err)
	}
	// The answer came 1.2s after the send: the cap (send + 0.9s) is past.
	if d, now := a.LeaseDeadline("svc.a"), time.Now(); d.After(now) {
		t.Fatalf("the late holding is led until %v from now, past its own write's 0.9s (session deadline %v from now)", d.Sub(now), a.Deadline().Sub(now))
	}
}
