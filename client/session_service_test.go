package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/internal/proofkey"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// newSessionService is the real lease API with sessions (httpapi and
// session.Registry over lease.Manager over the memory backend), on real
// time: the service's window runs on its monotonic clock.
func newSessionService(t *testing.T) *httptest.Server {
	t.Helper()
	srv, _ := newCountingSessionService(t, nil)
	return srv
}

// conns tracks the connections a listener accepted, so that a test can
// drop them all, WebSockets included (httptest forgets a hijacked one).
type conns struct {
	net.Listener
	mu sync.Mutex
	cs []net.Conn
}

func (l *conns) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.cs = append(l.cs, c)
		l.mu.Unlock()
	}
	return c, err
}

// drop closes every connection accepted so far.
func (l *conns) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.cs {
		_ = c.Close()
	}
	l.cs = nil
}

// newCountingSessionService is newSessionService counting the upgrade
// requests of the session route (when upgrades is not nil), with its
// listener's connections at the test's hand.
func newCountingSessionService(t *testing.T, upgrades *atomic.Int32) (*httptest.Server, *conns) {
	t.Helper()
	return newTestService(t, testService{sessions: &session.Config{}, wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if upgrades != nil && r.URL.Path == "/v1/sessions:connect" {
				upgrades.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	}})
}

// testService says how newTestService builds the service.
type testService struct {
	// sessions, when not nil, turns the session route on with this
	// configuration (its Events and Logger are set by newTestService).
	sessions *session.Config
	// wrap, when not nil, wraps the service's handler.
	wrap func(http.Handler) http.Handler
	// proofs turns signed proofs on (docs/contract.md §17): a key
	// published in the backend, its JWKS at /.well-known/jwks.json.
	proofs bool
}

// newTestService runs the service in process on the memory backend until
// the end of the test, with its listener's connections at the test's hand.
func newTestService(t *testing.T, o testService) (*httptest.Server, *conns) {
	t.Helper()
	events := hub.New()
	store := memory.New()
	m, err := lease.NewManager(store, lease.Config{OnChange: events.Publish})
	if err != nil {
		t.Fatal(err)
	}
	hc := httpapi.Config{Logger: slog.New(slog.DiscardHandler), Events: events}
	if o.proofs {
		iss, err := proofkey.Publish(t.Context(), store, proofkey.Config{Instance: "test"})
		if err != nil {
			t.Fatal(err)
		}
		hc.Proofs = iss
	}
	var reg *session.Registry
	if o.sessions != nil {
		sc := *o.sessions
		sc.Events, sc.Logger = events, slog.New(slog.DiscardHandler)
		if reg, err = session.New(session.Manager{M: m}, sc); err != nil {
			t.Fatal(err)
		}
		hc.Sessions = reg
	}
	h, err := httpapi.New(m, hc)
	if err != nil {
		t.Fatal(err)
	}
	var handler http.Handler = h
	if o.wrap != nil {
		handler = o.wrap(h)
	}
	srv := httptest.NewUnstartedServer(handler)
	ls := &conns{Listener: srv.Listener}
	srv.Listener = ls
	srv.Start()
	t.Cleanup(func() {
		h.CloseStreams()
		srv.CloseClientConnections()
		srv.Close()
		if reg != nil {
			reg.Stop()
		}
		ls.drop()
	})
	return srv, ls
}

// leadWith runs an Elector of name with cfg, over a Keeper of kcfg (with
// cfg's Logger), until the test (or the returned stop) ends it, and waits
// until it leads; it returns the leading context and stop, which ends Run,
// closes the Keeper and returns Run's error. logs is shown when it does
// not lead.
func leadWith(t *testing.T, c *client.Client, name string, kcfg client.KeeperConfig, cfg client.ElectorConfig, logs fmt.Stringer) (context.Context, func() error) {
	t.Helper()
	leading := make(chan context.Context, 1)
	cfg.Callbacks.OnStartedLeading = func(ctx context.Context) { leading <- ctx; <-ctx.Done() }
	if kcfg.Logger == nil {
		kcfg.Logger = cfg.Logger
	}
	k, err := client.NewKeeper(t.Context(), c, kcfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := client.NewElector(k, name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- e.Run(ctx) }()
	select {
	case lctx := <-leading:
		return lctx, func() error { cancel(); err := <-ran; k.Close(); return err }
	case err := <-ran:
		t.Fatalf("%s: Run returned %v before leading; log:\n%s", name, err, logs)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not leading after 10s; log:\n%s", name, logs)
	}
	return nil, nil
}

// TestSessionAgainstTheService: against the real service, an Elector holds
// its lease through a session (the lease says so), its deadline keeps
// moving with acknowledged heartbeats, a REST release by its holder is
// refused (409 session_held), an operator's revoke ends the term at once
// through the session's push, and a Session's Close releases what it
// holds at once.
func TestSessionAgainstTheService(t *testing.T) {
	srv := newSessionService(t)
	c, err := client.New(srv.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.OpenSession(t.Context(), client.SessionConfig{Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	leading := make(chan context.Context, 1)
	deadlines := make(chan time.Time, 100)
	e, err := keeperElector(t, c, "svc.real", client.KeeperConfig{Session: s}, client.ElectorConfig{
		Holder: "agent-a",
		Callbacks: client.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { leading <- ctx; <-ctx.Done() },
			OnSafeDeadline: func(d time.Time) {
				select {
				case deadlines <- d:
				default:
				}
			},
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
	if !l.Session || l.SessionWindow != time.Second {
		t.Fatalf("session %v with window %v, want session-held with window 1s", l.Session, l.SessionWindow)
	}
	// The deadline moves with the heartbeats, every window/4.
	var last time.Time
	for range 4 {
		d := <-deadlines
		if d.Before(last) {
			t.Fatalf("the deadline went back from %v to %v", last, d)
		}
		last = d
	}
	if ctx.Err() != nil {
		t.Fatalf("the term ended while heartbeats were acknowledged: %v", context.Cause(ctx))
	}
	// Only its session acts on a session-held holding: a REST release by
	// its holder is 409 session_held, and the term goes on.
	var held *client.Error
	if _, err := c.Release(t.Context(), "svc.real", "agent-a", l.FencingToken); !errors.As(err, &held) || held.Code != "session_held" || !errors.Is(err, client.ErrSessionHeld) || !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("REST release of a session-held holding: %v, want 409 session_held", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the term ended on a refused REST release: %v", context.Cause(ctx))
	}
	// An operator's revoke ends the holding; the session is told at once.
	if _, err := c.Revoke(t.Context(), "svc.real", client.RevokeRequest{Reason: "maintenance", FencingToken: l.FencingToken}); err != nil {
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

// TestSharedSessionAgainstTheService: Electors of one Client share one
// session by default (one socket), which survives a dropped connection
// (resume) without ending their terms, and closes when the last Elector
// stops, releasing nothing twice; PlainRenewals holds without a session.
func TestSharedSessionAgainstTheService(t *testing.T) {
	var upgrades atomic.Int32
	srv, ls := newCountingSessionService(t, &upgrades)
	c, err := client.New(srv.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	run := func(name string, plain bool) (context.Context, func() error) {
		return leadWith(t, c, name, client.KeeperConfig{PlainRenewals: plain}, client.ElectorConfig{Holder: "agent-a", Logger: logger}, logs)
	}
	ctxA, stopA := run("svc.shared-a", false)
	ctxB, stopB := run("svc.shared-b", false)
	ctxP, stopP := run("svc.shared-plain", true)
	if n := upgrades.Load(); n != 1 {
		t.Fatalf("%d session sockets for two Electors of one Client, want 1", n)
	}
	for name, want := range map[string]bool{"svc.shared-a": true, "svc.shared-b": true, "svc.shared-plain": false} {
		l, err := c.Get(t.Context(), name)
		if err != nil || !l.Held || l.Session != want {
			t.Fatalf("%s: %+v, %v; want held, session %v", name, l, err, want)
		}
	}

	// A dropped connection is not a dead session: the session resumes on a
	// new socket and both terms go on.
	ls.drop()
	waitFor(t, "the session resumed", func() bool { return upgrades.Load() == 2 })
	for name := range map[string]bool{"svc.shared-a": true, "svc.shared-b": true} {
		waitFor(t, name+" still held through the session", func() bool {
			l, err := c.Get(t.Context(), name)
			return err == nil && l.Held && l.Session && l.Holder == "agent-a"
		})
	}
	if ctxA.Err() != nil || ctxB.Err() != nil {
		t.Fatalf("a term ended on a dropped socket: %v, %v", context.Cause(ctxA), context.Cause(ctxB))
	}
	for _, stop := range []func() error{stopA, stopB, stopP} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"svc.shared-a", "svc.shared-b", "svc.shared-plain"} {
		if l, err := c.Get(t.Context(), name); err != nil || l.Held {
			t.Fatalf("%s after the Electors stopped: %+v, %v; log:\n%s", name, l, err, logs)
		}
	}
	_ = ctxP
}
