package leadercache_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/internal/fakeclock"
	"github.com/leasesvc/leasesvc/client/leadercache"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
)

// TestMain checks for leaked goroutines; opencensus (pulled in by the
// Pub/Sub client) starts a worker of its own at init.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// service runs the real API over the memory backend in-process, its
// changes going to its watch streams as cmd/leasesvc wires them.
func service(t *testing.T) *client.Client {
	t.Helper()
	events := hub.New()
	m, err := lease.NewManager(memory.New(), lease.Config{OnChange: events.Publish})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(slog.DiscardHandler), Events: events})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.CloseStreams(); srv.Close() })
	c, err := client.New(srv.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func event(typ client.EventType, holder string, token int64) client.Event {
	return client.Event{Type: typ, Lease: client.Lease{Name: "jobs", Holder: holder, FencingToken: token, Held: typ == client.EventAcquired}}
}

// TestEventsInAnyOrder: events applied in any order leave the newest; old
// and duplicate events are dropped.
func TestEventsInAnyOrder(t *testing.T) {
	c, err := leadercache.New(service(t), nil, leadercache.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []client.Event{
		event(client.EventAcquired, "b", 2),
		event(client.EventReleased, "a", 1), // late: older token
		event(client.EventAcquired, "a", 1), // late
		event(client.EventAcquired, "b", 2), // duplicate
		event(client.EventExpired, "b", 2),
		event(client.EventAcquired, "b", 2), // late within the token
	} {
		c.Apply(ev)
	}
	l, ok := c.Peek("jobs")
	if !ok || l.Held || l.Holder != "b" || l.FencingToken != 2 || l.Source != "expired" {
		t.Fatalf("entry %+v, want b's holding 2, expired", l)
	}
	if s := c.Stats(); s.Events != 2 || s.Dropped != 4 {
		t.Fatalf("stats %+v, want 2 applied, 4 dropped", s)
	}
}

// TestTTLReread: without events an entry is answered from memory for TTL,
// then read again from the service.
func TestTTLReread(t *testing.T) {
	svc := service(t)
	clock := fakeclock.New(time.Date(2026, 11, 21, 18, 0, 0, 0, time.UTC))
	c, err := leadercache.New(svc, nil, leadercache.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	l, err := c.Leader(ctx, "jobs")
	if err != nil || l.FencingToken != 0 || l.Held {
		t.Fatalf("a lease that never existed: %+v, %v", l, err)
	}
	if _, err := svc.Acquire(ctx, "jobs", client.AcquireRequest{Holder: "a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if l, _ = c.Leader(ctx, "jobs"); l.Held {
		t.Fatalf("within the TTL the cache answered from the service: %+v", l)
	}
	clock.Advance(leadercache.DefaultTTL)
	l, err = c.Leader(ctx, "jobs")
	if err != nil || !l.Held || l.Holder != "a" || l.FencingToken != 1 || l.Source != "read" {
		t.Fatalf("after the TTL: %+v, %v; want a re-read showing a", l, err)
	}
	if s := c.Stats(); s.Reads != 2 {
		t.Fatalf("%d reads, want 2", s.Reads)
	}
	// An event is news: it resets the age, and a read of the same holding
	// later confirms it.
	clock.Advance(time.Second)
	c.Apply(client.Event{Type: client.EventReleased, Lease: client.Lease{Name: "jobs", Holder: "a", FencingToken: 1}})
	if l, _ = c.Leader(ctx, "jobs"); l.Held || l.Age != 0 || l.Source != "released" {
		t.Fatalf("after a released event: %+v", l)
	}
	if err := c.Run(canceled()); err != nil {
		t.Fatal(err)
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
