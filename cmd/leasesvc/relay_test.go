package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// bus is a backend.Notifier in memory: every Listen gets every Notify.
type bus struct {
	mu   sync.Mutex
	subs []func(string)
}

func (b *bus) Notify(_ context.Context, p string) error {
	if len(p) > backend.MaxNotification {
		return io.ErrShortBuffer
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range b.subs {
		f(p)
	}
	return nil
}

func (b *bus) listeners() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

func (b *bus) Listen(ctx context.Context, got func(string)) error {
	b.mu.Lock()
	b.subs = append(b.subs, got)
	b.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

// TestRelayCarriesEventsToOtherInstances: what one instance's relay
// publishes, another's hands over whole and in order; an instance does not
// get its own events back; an event too large for a notification goes
// without its metadata rather than not at all; close flushes the queue.
func TestRelayCarriesEventsToOtherInstances(t *testing.T) {
	b := &bus{}
	log := slog.New(slog.DiscardHandler)
	a, other := newRelay(b, "a", log), newRelay(b, "b", log)
	got := map[string]chan lease.Event{"a": make(chan lease.Event, 8), "b": make(chan lease.Event, 8)}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	woken := make(chan string, 8)
	go func() { _ = a.listen(ctx, func(ev lease.Event) { got["a"] <- ev }, func(string) {}) }()
	go func() { _ = other.listen(ctx, func(ev lease.Event) { got["b"] <- ev }, func(n string) { woken <- n }) }()
	for b.listeners() < 2 {
		time.Sleep(time.Millisecond)
	}
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	ev := func(typ lease.EventType, token int64, md string) lease.Event {
		l := lease.Lease{ServerTime: at}
		l.Name, l.Holder, l.FencingToken, l.TTL, l.AcquireTime, l.RenewTime, l.ExpireTime, l.Transitions = "r.x", "h", token, time.Minute, at, at, at.Add(time.Minute), token
		l.Metadata = json.RawMessage(md)
		return lease.Event{Type: typ, Lease: l, Time: at}
	}
	big := `{"k":"` + strings.Repeat("x", backend.MaxNotification) + `"}`
	if err := b.Notify(t.Context(), backend.EndedNotification+"r.y"); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-woken:
		if n != "r.y" {
			t.Fatalf("woken for %q, want r.y", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an ended notification woke nobody")
	}
	a.publish(ev(lease.EventAcquired, 1, `{"addr":"10.0.0.7"}`))
	a.publish(ev(lease.EventReleased, 1, big))
	a.close(t.Context())
	for i, want := range []struct {
		typ lease.EventType
		md  string
	}{{lease.EventAcquired, `{"addr":"10.0.0.7"}`}, {lease.EventReleased, ""}} {
		select {
		case e := <-got["b"]:
			if e.Type != want.typ || e.Lease.FencingToken != 1 || e.Lease.Name != "r.x" || string(e.Lease.Metadata) != want.md && !(want.md == "" && string(e.Lease.Metadata) == "{}") {
				t.Fatalf("event %d: got %s token %d metadata %s, want %s metadata %q", i, e.Type, e.Lease.FencingToken, e.Lease.Metadata, want.typ, want.md)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d not relayed", i)
		}
	}
	select {
	case e := <-got["a"]:
		t.Fatalf("the sender got its own event back: %s", e.ID())
	case <-time.After(100 * time.Millisecond):
	}
	a.publish(ev(lease.EventAcquired, 2, `{}`)) // after close: dropped, no panic
}
