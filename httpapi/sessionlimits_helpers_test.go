package httpapi_test

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/audit"
	"github.com/leasesvc/leasesvc/session"
)

// manualClock is the process's clock, except that timers of duration
// manual fire only when the test says (fire).
type manualClock struct {
	manual time.Duration
	timers chan *manualTimer
}

func newManualClock(manual time.Duration) *manualClock {
	return &manualClock{manual: manual, timers: make(chan *manualTimer, 64)}
}

func (c *manualClock) Now() time.Time { return time.Now() }

func (c *manualClock) AfterFunc(d time.Duration, f func()) session.Timer {
	if d != c.manual {
		return time.AfterFunc(d, f)
	}
	t := &manualTimer{f: f}
	c.timers <- t
	return t
}

// next returns the next manual timer set, waiting for it.
func (c *manualClock) next(t *testing.T) *manualTimer {
	t.Helper()
	select {
	case tm := <-c.timers:
		return tm
	case <-time.After(20 * time.Second):
		t.Fatal("no timer set in 20s")
		return nil
	}
}

// manualTimer is a timer of a manualClock.
type manualTimer struct {
	f       func()
	stopped atomic.Bool
}

func (t *manualTimer) Stop() bool                 { return !t.stopped.Swap(true) }
func (t *manualTimer) Reset(d time.Duration) bool { return !t.stopped.Swap(false) }

// fire runs the timer's function now, unless it was stopped.
func (t *manualTimer) fire() {
	if !t.stopped.Swap(true) {
		t.f()
	}
}

// auditLine is the audit group of one audit line.
type auditLine struct{ Action, Outcome, Principal, Session, Detail string }

// auditSink collects audit lines; each is also sent on lines.
type auditSink struct {
	mu    sync.Mutex
	all   []auditLine
	lines chan auditLine
}

func newAuditSink() (*auditSink, *audit.Log) {
	s := &auditSink{lines: make(chan auditLine, 1024)}
	return s, audit.New(slog.New(slog.NewJSONHandler(s, nil)))
}

func (s *auditSink) Write(b []byte) (int, error) {
	var m struct{ Audit auditLine }
	if err := json.Unmarshal(b, &m); err == nil {
		s.mu.Lock()
		s.all = append(s.all, m.Audit)
		s.mu.Unlock()
		s.lines <- m.Audit
	}
	return len(b), nil
}

// wait returns the next line of action, waiting for it.
func (s *auditSink) wait(t *testing.T, action string) auditLine {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l := <-s.lines:
			if l.Action == action {
				return l
			}
		case <-timeout:
			t.Fatalf("no %s audit line in 20s", action)
		}
	}
}

// socketsDone counts the session sockets of srvs that ended (their slot
// and charge given back) from now until the test ends.
func socketsDone(t *testing.T, srvs ...*httptest.Server) chan struct{} {
	t.Helper()
	hosts := map[string]bool{}
	for _, srv := range srvs {
		hosts[strings.TrimPrefix(srv.URL, "http://")] = true
	}
	ch := make(chan struct{}, 1024)
	t.Cleanup(httpapi.SetSocketDone(func(host string) {
		if hosts[host] {
			ch <- struct{}{}
		}
	}))
	return ch
}

// waitDone waits for n sockets to end.
func waitDone(t *testing.T, ch chan struct{}, n int) {
	t.Helper()
	for range n {
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			t.Fatal("a socket did not end in 20s")
		}
	}
}

// gate holds the writes of the connections of a gatedServer while shut.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // nil: writes pass
}

// shut makes writes wait from now; release lets them go.
func (g *gate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		close(g.open)
		g.open = nil
	}
}

func (g *gate) wait() {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

type gatedListener struct {
	net.Listener
	g *gate
}

func (l gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return gatedConn{Conn: c, g: l.g}, nil
}

type gatedConn struct {
	net.Conn
	g *gate
}

func (c gatedConn) Write(b []byte) (int, error) {
	c.g.wait()
	return c.Conn.Write(b)
}

// gatedServer serves in's handler on connections whose writes wait while
// the returned gate is shut: a client that does not read, without
// filling a kernel's socket buffers.
func gatedServer(t *testing.T, in *sessionInstance) (*httptest.Server, *gate) {
	t.Helper()
	g := &gate{}
	srv := httptest.NewUnstartedServer(in.h)
	srv.Listener = gatedListener{Listener: srv.Listener, g: g}
	srv.Start()
	t.Cleanup(func() {
		g.release()
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv, g
}

// wsURL is the session route of a test server.
func wsURL(srv *httptest.Server) string {
	return strings.Replace(srv.URL, "http", "ws", 1) + httpapi.SessionsPath
}
