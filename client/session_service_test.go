package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// newSessionService is the real lease API with sessions (httpapi and
// session.Registry over lease.Manager over the memory backend), on real
// time: the service's window runs on its monotonic clock.
func newSessionService(t *testing.T) *httptest.Server {
	t.Helper()
	events := hub.New()
	m, err := lease.NewManager(memory.New(), lease.Config{OnChange: events.Publish})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := session.New(session.Manager{M: m}, session.Config{Events: events, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(slog.DiscardHandler), Events: events, Sessions: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.CloseStreams()
		srv.CloseClientConnections()
		srv.Close()
		reg.Stop()
	})
	return srv
}

// TestSessionAgainstTheService: against the real service, an Elector holds
// its lease through a session (the lease says so), its deadline keeps
// moving with acknowledged heartbeats, a REST release by its holder ends
// the term at once through the session's push, and a Session's Close
// releases what it holds at once.
func TestSessionAgainstTheService(t *testing.T) {
	srv := newSessionService(t)
	c, err := client.New(srv.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.OpenSession(t.Context(), client.SessionConfig{Window: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	leading := make(chan context.Context, 1)
	deadlines := make(chan time.Time, 100)
	e, err := client.NewElector(c, "svc.real", client.ElectorConfig{
		Holder: "agent-a", Session: s, CancelBefore: 20 * time.Millisecond,
		OnStartedLeading: func(ctx context.Context) { leading <- ctx; <-ctx.Done() },
		OnSafeDeadline: func(d time.Time) {
			select {
			case deadlines <- d:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := runElector(t, e)
	ctx := <-leading
	l, err := c.Get(t.Context(), "svc.real")
	if err != nil || !l.Held || l.Holder != "agent-a" {
		t.Fatalf("get: %+v, %v", l, err)
	}
	if l.Session && l.SessionWindow != 200*time.Millisecond {
		t.Fatalf("session-held with window %v, want 200ms", l.SessionWindow)
	}
	// The deadline moves with the heartbeats, every window/4.
	var last time.Time
	for range 8 {
		d := <-deadlines
		if d.Before(last) {
			t.Fatalf("the deadline went back from %v to %v", last, d)
		}
		last = d
	}
	if ctx.Err() != nil {
		t.Fatalf("the term ended while heartbeats were acknowledged: %v", context.Cause(ctx))
	}
	// A REST release by the holder ends the holding; the session is told.
	if _, err := c.Release(t.Context(), "svc.real", "agent-a", l.FencingToken); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, client.ErrLost) {
		t.Fatalf("cause %v, want ErrLost", cause)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// Close releases at once what the session holds.
	if _, err := s.Acquire(t.Context(), "svc.closed", client.AcquireRequest{Holder: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if l, err := c.Get(t.Context(), "svc.closed"); err != nil || l.Held {
		t.Fatalf("after close: %+v, %v", l, err)
	}
	if _, err := s.Acquire(t.Context(), "svc.closed", client.AcquireRequest{Holder: "agent-a"}); !errors.Is(err, client.ErrSessionClosed) {
		t.Fatalf("acquire after close: %v", err)
	}
}
