package httpapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/session"
)

// TestSessionAnswersAfterIdle: the write deadline bounds the service's
// own writes only, so after the service wrote nothing for longer than
// LEASESVC_WRITE_TIMEOUT the library's own answers still go out: a ping's
// pong, and the close of the RFC 6455 handshake (found by review: a
// deadline left set after the last write failed them at once). The idle
// time is real (the deadline is the kernel's), and longer than the timeout
// whatever the machine's load.
func TestSessionAnswersAfterIdle(t *testing.T) {
	const timeout = 300 * time.Millisecond
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{Limits: httpapi.Limits{WriteTimeout: timeout}})
	w := dial(t, in.srv.URL, "")
	w.open(60000)
	time.Sleep(2 * timeout)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.c.Ping(ctx); err != nil {
		t.Fatalf("ping after %v idle: %v", 2*timeout, err)
	}
	time.Sleep(2 * timeout)
	if err := w.c.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatalf("close after %v idle: %v, want the service's close answered", 2*timeout, err)
	}
	if end := <-w.end; websocket.CloseStatus(end) != websocket.StatusNormalClosure {
		t.Fatalf("socket ended with %v, want the close handshake (1000)", end)
	}
}
