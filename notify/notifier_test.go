package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/notify"
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

// TestNotifierCarriesEventsToOtherInstances: what one instance's Notifier
// publishes, another's hands over whole and in order; an instance does not
// get its own events back; an event too large for a notification goes
// without its metadata rather than not at all; an ended notification
// reaches Handler.Ended; Close flushes the queue; Subscribe returns nil
// once its context is done.
func TestNotifierCarriesEventsToOtherInstances(t *testing.T) {
	synctest.Test(t, notifierCarriesEventsToOtherInstances)
}

// notifierCarriesEventsToOtherInstances is TestNotifierCarriesEventsToOtherInstances's body, run in a synctest bubble: fake time.
func notifierCarriesEventsToOtherInstances(t *testing.T) {
	b := &bus{}
	log := slog.New(slog.DiscardHandler)
	var a, other notify.Transport = notify.NewNotifier(b, "a", log), notify.NewNotifier(b, "b", log)
	got := map[string]chan lease.Event{"a": make(chan lease.Event, 8), "b": make(chan lease.Event, 8)}
	defer func() { _ = other.Close(context.Background()) }() // its sender ends with the bubble
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	woken := make(chan string, 8)
	subscribed := make(chan error, 2)
	go func() { subscribed <- a.Subscribe(ctx, notify.Handler{Event: func(ev lease.Event) { got["a"] <- ev }}) }()
	go func() {
		subscribed <- other.Subscribe(ctx, notify.Handler{Event: func(ev lease.Event) { got["b"] <- ev }, Ended: func(n string) { woken <- n }})
	}()
	synctest.Wait() // both Subscribes listen
	if n := b.listeners(); n != 2 {
		t.Fatalf("%d listeners, want 2", n)
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
	for _, e := range []lease.Event{ev(lease.EventAcquired, 1, `{"addr":"10.0.0.7"}`), ev(lease.EventReleased, 1, big)} {
		if err := a.Publish(e); err != nil {
			t.Fatalf("Publish(%s) = %v", e.ID(), err)
		}
	}
	if err := a.Close(t.Context()); err != nil {
		t.Fatalf("Close = %v", err)
	}
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
	if err := a.Publish(ev(lease.EventAcquired, 2, `{}`)); !errors.Is(err, notify.ErrDropped) { // after Close: dropped, no panic
		t.Fatalf("Publish after Close = %v, want ErrDropped", err)
	}
	cancel()
	for range 2 {
		if err := <-subscribed; err != nil {
			t.Fatalf("Subscribe after its context ended = %v, want nil", err)
		}
	}
}
