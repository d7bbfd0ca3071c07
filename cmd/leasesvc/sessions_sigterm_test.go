package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// TestSIGTERMMovesSessions: on SIGTERM the real binary asks every session
// socket to move (reason shutdown); a session that then neither moves nor
// heartbeats is ended after its window (audit line session_expire), and the
// process exits cleanly within the shutdown budget.
func TestSIGTERMMovesSessions(t *testing.T) {
	svc := e2e.StartService(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, strings.Replace(svc.URL, "http", "ws", 1)+httpapi.SessionsPath,
		&websocket.DialOptions{Subprotocols: []string{httpapi.SessionSubprotocol}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.CloseNow()
	send := func(m string) {
		if err := c.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	next := func() map[string]any {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return m
	}
	send(`{"type":"open","id":1,"windowMs":1000}`)
	if m := next(); m["type"] != "opened" {
		t.Fatalf("open: %v", m)
	}
	send(`{"type":"acquire","id":2,"name":"sigterm-session","holder":"h"}`)
	if m := next(); m["type"] != "result" {
		t.Fatalf("acquire: %v", m)
	}
	stopped := make(chan error, 1)
	var took time.Duration
	go func() {
		var err error
		took, err = svc.Stop()
		stopped <- err
	}()
	if m := next(); m["type"] != "move" || m["reason"] != "shutdown" {
		t.Fatalf("after SIGTERM: %v, want move (shutdown)", m)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, svc.Output())
	}
	if took >= 9*time.Second {
		t.Errorf("exit took %v after SIGTERM, want < 9s", took)
	}
	if out := svc.Output(); !strings.Contains(out, `"action":"session_expire"`) {
		t.Errorf("no session_expire audit line after the silent session's window:\n%.4000s", out)
	}
}
