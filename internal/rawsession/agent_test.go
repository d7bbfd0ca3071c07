package rawsession_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/internal/rawsession"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// instance is an in-process leasesvc with sessions over store.
type instance struct {
	m      *lease.Manager
	reg    *session.Registry
	srv    *httptest.Server
	events *hub.Hub
}

func newInstance(t *testing.T, store backend.Store) *instance {
	t.Helper()
	h := hub.New()
	m, err := lease.NewManager(store, lease.Config{OnChange: h.Publish})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg, err := session.New(session.Manager{M: m}, session.Config{LeaseTTL: 3 * time.Second, Events: h, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(m, httpapi.Config{Logger: log, Events: h, Sessions: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		reg.Stop()
	})
	return &instance{m: m, reg: reg, srv: srv, events: h}
}

// wakeup wakes waitFor: an agent's Trace calls it on each line (an ack
// is one), so that a test sees the agent lead as soon as it does.
type wakeup struct {
	mu sync.Mutex
	c  chan struct{} // closed, and replaced, by trace
}

// trace is an Agent's Trace.
func (w *wakeup) trace(string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.c != nil {
		close(w.c)
		w.c = nil
	}
}

// next returns a channel closed by the next trace line.
func (w *wakeup) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.c == nil {
		w.c = make(chan struct{})
	}
	return w.c
}

// waitFor tests cond after each of the agent's trace lines (w) until it
// holds, failing t after d.
func waitFor(t *testing.T, w *wakeup, d time.Duration, what string, cond func() bool) {
	t.Helper()
	limit := time.NewTimer(d)
	defer limit.Stop()
	for {
		next := w.next()
		if cond() {
			return
		}
		select {
		case <-next:
		case <-limit.C:
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// TestAgentLeadsAndDies: an agent leads once acked, until its deadline;
// killed, its lease is released within about a window, and it led no
// longer than that.
func TestAgentLeadsAndDies(t *testing.T) {
	in := newInstance(t, memory.New())
	w := &wakeup{}
	a := &rawsession.Agent{URLs: []string{in.srv.URL}, Window: 300 * time.Millisecond, Trace: w.trace}
	if _, err := a.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	l, err := a.Acquire(t.Context(), "x", "h", 0)
	if err != nil || l.Holder != "h" {
		t.Fatalf("acquire: %+v, %v", l, err)
	}
	if g, err := in.m.Get(t.Context(), "x"); err != nil || !g.Session {
		t.Fatalf("not held through a session: %+v, %v", g, err)
	}
	waitFor(t, w, time.Second, "the agent leads", a.Leads)
	if d := time.Until(a.Deadline()); d > 270*time.Millisecond {
		t.Fatalf("deadline %v ahead, more than window × 0.9", d)
	}
	sub := in.events.Subscribe("x")
	defer in.events.Unsubscribe(sub)
	a.Kill()
	deadline := a.Deadline()
	select {
	case ev := <-sub.C:
		if !ev.Ends() {
			t.Fatalf("after the kill: %s event, want the holding ended", ev.Type)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the lease is not released within 2s of the kill")
	}
	g, _ := in.m.Get(t.Context(), "x")
	if g.Held() {
		t.Fatalf("after its released event the lease is held: %+v", g)
	}
	if g.ExpireTime.Before(deadline) {
		t.Fatalf("released at %v, before the agent's deadline %v", g.ExpireTime, deadline)
	}
	if a.Leads() {
		t.Fatal("a killed agent leads")
	}
}

// TestAgentResumes: asked to move (the instance shuts down), the agent
// resumes on the next instance with its holding and leads again with the
// same token.
func TestAgentResumes(t *testing.T) {
	store := memory.New()
	one, two := newInstance(t, store), newInstance(t, store)
	resumed := make(chan rawsession.Message, 1)
	w := &wakeup{}
	a := &rawsession.Agent{URLs: []string{one.srv.URL, two.srv.URL}, Window: 500 * time.Millisecond, Trace: w.trace,
		OnResume: func(_ string, m rawsession.Message) { resumed <- m }}
	if _, err := a.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(context.Background()) }()
	l, err := a.Acquire(t.Context(), "x", "h", 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, time.Second, "the agent leads", a.Leads)
	go one.reg.Shutdown(context.Background(), context.Background())
	select {
	case m := <-resumed:
		if len(m.Lost) != 0 || m.Epoch != 2 {
			t.Fatalf("resumed %+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no resume: %v", a.LastErr())
	}
	g, err := two.m.Get(t.Context(), "x")
	if err != nil || g.Holder != "h" || g.FencingToken != l.FencingToken || !g.Held() || g.SessionEpoch != 2 {
		t.Fatalf("after the resume: %+v, %v", g, err)
	}
	if h := a.Held(); len(h) != 1 || h[0].FencingToken != l.FencingToken {
		t.Fatalf("held %v", h)
	}
}

// TestConcurrentSendsKeepIDsIncreasing: requests and heartbeats sent from
// several goroutines at once reach the service with increasing ids (a
// sender that took a larger id must not write first: the service closes
// the socket with session_protocol, which dropped leasebench's session of
// 1,000 leases).
func TestConcurrentSendsKeepIDsIncreasing(t *testing.T) {
	in := newInstance(t, memory.New())
	c, err := rawsession.Dial(t.Context(), in.srv.URL, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Drop()
	if _, err := c.Open(t.Context(), time.Second); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for k := range 15 {
				if k%4 == 0 {
					_ = c.Heartbeat(t.Context())
				}
				if _, err := c.Request(t.Context(), rawsession.Message{Type: "acquire", Name: fmt.Sprintf("ids.%d.%d", g, k), Holder: "h"}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a request failed: %v (the socket ended: %v)", err, c.Err())
	}
}
