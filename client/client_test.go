package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

func TestClientOperationsAndErrors(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{})
	ctx := t.Context()

	if _, err := c.Get(ctx, "jobs.a"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get of a new lease: %v, want ErrNotFound", err)
	}
	a, err := c.Acquire(ctx, "jobs.a", client.AcquireRequest{Holder: "agent-a", TTL: 30 * time.Second, Metadata: []byte(`{"addr":"10.0.0.7"}`)})
	if err != nil || a.FencingToken != 1 || !a.Held || a.Holder != "agent-a" || a.TTL != 30*time.Second || string(a.Metadata) != `{"addr":"10.0.0.7"}` {
		t.Fatalf("acquire = %+v, %v", a, err)
	}
	_, err = c.Acquire(ctx, "jobs.a", client.AcquireRequest{Holder: "agent-b", TTL: 30 * time.Second})
	var held *client.HeldError
	if !errors.Is(err, client.ErrHeld) || !errors.As(err, &held) || held.Lease.Holder != "agent-a" || held.Lease.FencingToken != 1 || held.RetryAfter != 30*time.Second {
		t.Fatalf("acquire by b: %v (%+v), want ErrHeld carrying a's holding", err, held)
	}
	if _, err := c.Renew(ctx, "jobs.a", client.RenewRequest{Holder: "agent-a", FencingToken: 2}); !errors.Is(err, client.ErrLost) {
		t.Fatalf("renew with a wrong token: %v, want ErrLost", err)
	}
	r, err := c.Renew(ctx, "jobs.a", client.RenewRequest{Holder: "agent-a", FencingToken: 1, TTL: 20 * time.Second})
	if err != nil || r.TTL != 20*time.Second || r.FencingToken != 1 {
		t.Fatalf("renew = %+v, %v", r, err)
	}
	for range 2 { // release is idempotent
		rel, err := c.Release(ctx, "jobs.a", "agent-a", 1)
		if err != nil || rel.Held || !rel.ExpireTime.Equal(rel.ServerTime) && rel.Remaining != 0 {
			t.Fatalf("release = %+v, %v", rel, err)
		}
	}
	b, err := c.Acquire(ctx, "jobs.a", client.AcquireRequest{Holder: "agent-b", TTL: 30 * time.Second})
	if err != nil || b.FencingToken != 2 || b.Transitions != 2 {
		t.Fatalf("acquire after release = %+v, %v; want token 2", b, err)
	}

	_, err = c.Acquire(ctx, "bad name", client.AcquireRequest{Holder: "x", TTL: 10 * time.Millisecond})
	var e *client.Error
	if !errors.Is(err, client.ErrInvalid) || !errors.As(err, &e) || e.Status != 400 || e.Code != "invalid_argument" || len(e.Fields) == 0 {
		t.Fatalf("bad acquire: %v, want ErrInvalid with fields", err)
	}
	if _, err := c.Acquire(ctx, "jobs.c", client.AcquireRequest{Holder: "x", TTL: 10 * time.Millisecond}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("ttl below the minimum: %v, want ErrInvalid", err)
	}
	t.Logf("errors read: %v", err)
}

func TestListPagesAndAll(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{})
	ctx := t.Context()
	for i := range 25 {
		if _, err := c.Acquire(ctx, fmt.Sprintf("ns.l%02d", i), client.AcquireRequest{Holder: "h", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Acquire(ctx, "other", client.AcquireRequest{Holder: "h", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	p, err := c.List(ctx, client.ListRequest{Prefix: "ns.", PageSize: 10})
	if err != nil || len(p.Leases) != 10 || p.NextPageToken == "" || p.Leases[0].Name != "ns.l00" {
		t.Fatalf("first page = %d leases, next %q, %v", len(p.Leases), p.NextPageToken, err)
	}
	var names []string
	for l, err := range c.All(ctx, "ns.") {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, l.Name)
	}
	if len(names) != 25 || names[24] != "ns.l24" {
		t.Fatalf("All = %v", names)
	}
	empty, err := c.List(ctx, client.ListRequest{Prefix: "none."})
	if err != nil || empty.Leases == nil || len(empty.Leases) != 0 {
		t.Fatalf("empty list = %+v, %v", empty, err)
	}
	if _, err := c.List(ctx, client.ListRequest{PageToken: "%%"}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("bad page token: %v", err)
	}
}

// TestRetries: transient answers are retried with backoff, up to
// MaxAttempts; refusals are not.
func TestRetries(t *testing.T) {
	s := newService(t, nil)
	var calls, failFirst atomic.Int32
	status := atomic.Int32{}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if n <= failFirst.Load() {
			w.WriteHeader(int(status.Load()))
			_, _ = w.Write([]byte("<html>upstream trouble</html>"))
			return
		}
		s.Config.Handler.ServeHTTP(w, r)
	}))
	defer front.Close()
	c, err := client.New(front.URL, client.Config{MaxAttempts: 4, Backoff: client.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []int{502, 503, 504, 429} {
		calls.Store(0)
		failFirst.Store(3)
		status.Store(int32(code))
		if _, err := c.Acquire(t.Context(), "retry.a", client.AcquireRequest{Holder: "h", TTL: time.Minute}); err != nil || calls.Load() != 4 {
			t.Fatalf("%d three times then OK: %v after %d calls", code, err, calls.Load())
		}
		calls.Store(0)
		failFirst.Store(10)
		_, err := c.Get(t.Context(), "retry.a")
		var e *client.Error
		if !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &e) || e.Status != code || calls.Load() != 4 {
			t.Fatalf("%d every time: %v after %d calls, want ErrUnavailable after 4", code, err, calls.Load())
		}
	}
	calls.Store(0)
	failFirst.Store(0)
	if _, err := c.Acquire(t.Context(), "retry.a", client.AcquireRequest{Holder: "other", TTL: time.Minute}); !errors.Is(err, client.ErrHeld) || calls.Load() != 1 {
		t.Fatalf("lease_held: %v after %d calls, want one call", err, calls.Load())
	}

	dead, err := client.New("http://"+closedPort(t), client.Config{MaxAttempts: 3, Backoff: client.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Get(t.Context(), "x"); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("unreachable service: %v, want ErrUnavailable", err)
	}
}

// TestRequestTimeout: an attempt that hangs is cut at RequestTimeout and
// retried.
func TestRequestTimeout(t *testing.T) {
	s := newService(t, nil)
	s.set(hang)
	c := s.client(t, client.Config{RequestTimeout: 50 * time.Millisecond, MaxAttempts: 2, Backoff: client.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	start := time.Now()
	_, err := c.Get(t.Context(), "x")
	if !errors.Is(err, client.ErrUnavailable) || time.Since(start) > 5*time.Second {
		t.Fatalf("hanging service: %v after %v", err, time.Since(start))
	}
	s.set(healthy)
}

func TestWatch(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{Backoff: client.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}})
	ctx := t.Context()
	st, err := c.Watch(ctx, "w.a")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	next := func(want client.EventType, token int64) client.Event {
		t.Helper()
		ev, err := st.Next()
		if err != nil || ev.Type != want || ev.Lease.FencingToken != token {
			t.Fatalf("next = %+v, %v; want %s with token %d", ev, err, want, token)
		}
		return ev
	}
	if ev := next(client.EventState, 0); ev.Lease.Name != "" {
		t.Fatalf("a lease that never existed: %+v", ev)
	}
	if _, err := c.Acquire(ctx, "w.a", client.AcquireRequest{Holder: "a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	next(client.EventAcquired, 1)
	if _, err := c.Release(ctx, "w.a", "a", 1); err != nil {
		t.Fatal(err)
	}
	rel := next(client.EventReleased, 1)
	if rel.ID() != "w.a/1/released" {
		t.Fatalf("id %s", rel.ID())
	}
	// A dropped connection is reconnected; the stream says the state anew.
	s.CloseClientConnections()
	if _, err := c.Acquire(ctx, "w.a", client.AcquireRequest{Holder: "b", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ev, err := st.Next()
	if err != nil || ev.Type != client.EventState && ev.Type != client.EventAcquired || ev.Lease.FencingToken != 2 {
		t.Fatalf("after a reconnect: %+v, %v; want the state with token 2", ev, err)
	}
	_ = st.Close()
	if _, err := st.Next(); err == nil {
		t.Fatal("Next after Close succeeded")
	}
	if _, err := c.Watch(ctx, "-bad"); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("watch of a bad name: %v", err)
	}
}

func TestNewer(t *testing.T) {
	ev := func(typ client.EventType, token int64) client.Event {
		return client.Event{Type: typ, Lease: client.Lease{Name: "n", FencingToken: token}}
	}
	cases := []struct {
		a, b client.Event
		want bool
	}{
		{ev(client.EventAcquired, 1), ev(client.EventReleased, 1), true},
		{ev(client.EventReleased, 1), ev(client.EventAcquired, 1), false},
		{ev(client.EventReleased, 1), ev(client.EventReleased, 1), false},
		{ev(client.EventExpired, 1), ev(client.EventAcquired, 2), true},
		{ev(client.EventAcquired, 3), ev(client.EventExpired, 2), false},
	}
	for _, tc := range cases {
		if got := client.Newer(tc.a, tc.b); got != tc.want {
			t.Errorf("Newer(%s, %s) = %v", tc.a.ID(), tc.b.ID(), got)
		}
	}
}
