package hub

import (
	"slices"
	"testing"

	"github.com/leasesvc/leasesvc/lease"
)

func ev(name string, token int64, typ lease.EventType) lease.Event {
	return lease.Event{Type: typ, Lease: lease.Lease{Record: lease.Record{Name: name, FencingToken: token}}, Previous: lease.Lease{Record: lease.Record{Name: name, Metadata: []byte(`{"big":true}`)}}}
}

func ids(evs []lease.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID())
	}
	return out
}

// TestRecentRing: the hub keeps the n most recent distinct events, oldest
// first, once each even when an event comes twice (its own change, then
// Pub/Sub's copy), without the Previous lease.
func TestRecentRing(t *testing.T) {
	h := NewWithRecent(3)
	h.Publish(ev("a.x", 1, lease.EventAcquired))
	h.Publish(ev("a.x", 1, lease.EventAcquired)) // again
	h.Publish(ev("b.y", 1, lease.EventAcquired))
	h.Publish(ev("a.x", 1, lease.EventReleased))
	if got := ids(h.Recent("")); !slices.Equal(got, []string{"a.x/1/acquired", "b.y/1/acquired", "a.x/1/released"}) {
		t.Fatalf("recent %v", got)
	}
	h.Publish(ev("a.x", 2, lease.EventAcquired))
	if got := ids(h.Recent("a.")); !slices.Equal(got, []string{"a.x/1/released", "a.x/2/acquired"}) {
		t.Fatalf("recent under a. after the oldest went %v", got)
	}
	// Once it has gone, an event may be kept again.
	h.Publish(ev("a.x", 1, lease.EventAcquired))
	if got := ids(h.Recent("a.x")); len(got) != 3 || got[2] != "a.x/1/acquired" {
		t.Fatalf("recent %v", got)
	}
	if r := h.Recent(""); r[0].Previous.Name != "" {
		t.Fatal("the ring keeps Previous")
	}
	none := NewWithRecent(0)
	none.Publish(ev("a", 1, lease.EventAcquired))
	if len(none.Recent("")) != 0 {
		t.Fatal("a hub of 0 recent events keeps some")
	}
}

// TestSubscribePrefix: a prefix subscription gets the events of every lease
// under the prefix and only those, with the kept events of the prefix as of
// the moment it subscribed; Watchers counts it.
func TestSubscribePrefix(t *testing.T) {
	h := New()
	h.Publish(ev("team-a.x", 1, lease.EventAcquired))
	h.Publish(ev("team-b.x", 1, lease.EventAcquired))
	s, recent := h.SubscribePrefix("team-a.")
	if got := ids(recent); !slices.Equal(got, []string{"team-a.x/1/acquired"}) {
		t.Fatalf("recent %v", got)
	}
	one := h.Subscribe("team-a.y")
	if h.Watchers() != 2 {
		t.Fatalf("%d watchers, want 2", h.Watchers())
	}
	h.Publish(ev("team-b.y", 1, lease.EventAcquired))
	h.Publish(ev("team-a.y", 1, lease.EventAcquired))
	if got := (<-s.C).ID(); got != "team-a.y/1/acquired" {
		t.Fatalf("prefix sub got %s", got)
	}
	if got := (<-one.C).ID(); got != "team-a.y/1/acquired" {
		t.Fatalf("lease sub got %s", got)
	}
	select {
	case e := <-s.C:
		t.Fatalf("prefix sub got %s too", e.ID())
	default:
	}
	h.Unsubscribe(s)
	h.Unsubscribe(one)
	if h.Watchers() != 0 {
		t.Fatalf("%d watchers after unsubscribing", h.Watchers())
	}
	h.Publish(ev("team-a.z", 1, lease.EventAcquired)) // nobody to deliver to
}

// BenchmarkPublishToPrefixStreams: one event fanned out to 1,000 prefix
// streams (half of them under a matching prefix) and kept in the ring.
func BenchmarkPublishToPrefixStreams(b *testing.B) {
	h := New()
	for i := range 1000 {
		p := "team-a."
		if i%2 == 1 {
			p = "team-b."
		}
		s, _ := h.SubscribePrefix(p)
		go func() {
			for range s.C { // drain
			}
		}()
		b.Cleanup(func() { h.Unsubscribe(s); close(s.C) })
	}
	b.ResetTimer()
	for i := range b.N {
		h.Publish(ev("team-a.x", int64(i+1), lease.EventAcquired))
	}
}
