package client_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/internal/fakeclock"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
)

// fault is how the test service answers lease operations.
type fault int32

const (
	healthy     fault = iota
	unavailable       // 503 unavailable with Retry-After: 1
	hang              // no answer until the client gives up
	drop              // the connection is closed without an answer
	lost              // renew answers 409 lease_lost
	limited           // 429 resource_exhausted with Retry-After: 5
)

// service is the real lease API (httpapi over lease.Manager over the memory
// backend) in-process, with a server clock that is the test's fake clock
// and a switch that makes it fail.
type service struct {
	*httptest.Server
	clock    *fakeclock.Clock
	fault    atomic.Int32
	renews   atomic.Int32 // renew requests seen
	renewed  atomic.Int64 // when the last renew request came, Unix ns
	acquires atomic.Int32 // acquire requests seen
	handler  *httpapi.Handler
	closing  chan struct{} // closed when the test ends
}

func newService(t testing.TB, clock *fakeclock.Clock) *service {
	t.Helper()
	s := newServiceHandler(t, clock)
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		close(s.closing)
		s.handler.CloseStreams()
		s.CloseClientConnections()
		s.Close()
	})
	return s
}

// newServiceHandler returns the service without a server: its serve
// answers in-process (bubbleClient).
func newServiceHandler(t testing.TB, clock *fakeclock.Clock) *service {
	t.Helper()
	var now func() time.Time = memory.MonotonicClock()
	if clock != nil {
		now = clock.Now
	}
	events := hub.New()
	m, err := lease.NewManager(memory.New(memory.WithClock(now)), lease.Config{OnChange: events.Publish})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(slog.DiscardHandler), Events: events})
	if err != nil {
		t.Fatal(err)
	}
	return &service{clock: clock, handler: h, closing: make(chan struct{})}
}

// serve answers r as the service does, with its fault.
func (s *service) serve(w http.ResponseWriter, r *http.Request) {
	h := s.handler
	if strings.HasSuffix(r.URL.Path, ":renew") {
		s.renews.Add(1)
		s.renewed.Store(time.Now().UnixNano())
	}
	if strings.HasSuffix(r.URL.Path, ":acquire") {
		s.acquires.Add(1)
	}
	f := fault(s.fault.Load())
	if !strings.HasPrefix(r.URL.Path, "/v1/leases") {
		f = healthy // the faults are of lease operations
	}
	switch f {
	case limited:
		w.Header().Set("Retry-After", "5")
		problem(w, http.StatusTooManyRequests, "resource_exhausted", nil)
		return
	case unavailable:
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "unavailable", nil)
		return
	case hang:
		_, _ = io.Copy(io.Discard, r.Body) // so the server notices the client going away
		select {
		case <-r.Context().Done():
		case <-s.closing:
		}
		return
	case drop:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	case lost:
		if strings.HasSuffix(r.URL.Path, ":renew") {
			problem(w, http.StatusConflict, "lease_lost", nil)
			return
		}
	}
	h.ServeHTTP(w, r)
}

func (s *service) set(f fault) { s.fault.Store(int32(f)) }

// client returns a Client of the service that does not retry, so that the
// Elector's own retries (on the fake clock) are what a test sees.
func (s *service) client(t testing.TB, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(s.URL, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitFor polls cond (real time, briefly) until it holds; the fake clock
// does not move meanwhile.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// closedPort returns an address on which nothing listens.
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
