package leadercache_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/internal/fakeclock"
	"github.com/leasesvc/leasesvc/client/leadercache"
)

// TestReservationShown: an entry shows the reservation of its last news
// (docs/contract.md §8) — from a read of the service after a transfer, and
// from a released event naming the successor — until it lapses by the
// cache's clock or a new holding begins.
func TestReservationShown(t *testing.T) {
	c := service(t)
	ctx := t.Context()
	if _, err := c.Acquire(ctx, "jobs", client.AcquireRequest{Holder: "a", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Transfer(ctx, "jobs", client.TransferRequest{Holder: "a", FencingToken: 1, To: "b", Checkpoint: json.RawMessage(`{"n":1}`), Reserve: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	clock := fakeclock.New(time.Now())
	cache, err := leadercache.New(c, nil, leadercache.Config{Clock: clock, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l, err := cache.Leader(ctx, "jobs")
	if left := l.ReservedUntil.Sub(l.Lease.ServerTime); err != nil || l.Held || l.ReservedFor != "b" || left > 30*time.Second || left < 29*time.Second {
		t.Fatalf("after a transfer to b: %+v, %v", l, err)
	}
	clock.Advance(29 * time.Second)
	if l, _ := cache.Peek("jobs"); l.ReservedFor != "b" {
		t.Fatalf("29s into a 30s reservation: ReservedFor %q", l.ReservedFor)
	}
	clock.Advance(time.Second)
	if l, _ := cache.Peek("jobs"); l.ReservedFor != "" || !l.ReservedUntil.IsZero() {
		t.Fatalf("after the reservation lapsed: ReservedFor %q until %v", l.ReservedFor, l.ReservedUntil)
	}

	// Events: a released event of a transfer shows its successor and the
	// reservation; the successor's acquired event ends it.
	rel := event(client.EventReleased, "b", 2)
	rel.Successor = "c"
	rel.Lease.ServerTime = time.Now()
	rel.Lease.ReservedFor, rel.Lease.ReservedUntil = "c", rel.Lease.ServerTime.Add(5*time.Second)
	if !cache.Apply(rel) {
		t.Fatal("the released event of token 2 was not applied")
	}
	if l, _ := cache.Peek("jobs"); l.ReservedFor != "c" || l.Successor != "c" || l.Held {
		t.Fatalf("after b's transfer to c: %+v", l)
	}
	acq := event(client.EventAcquired, "c", 3)
	if !cache.Apply(acq) {
		t.Fatal("c's acquired event was not applied")
	}
	if l, _ := cache.Peek("jobs"); l.ReservedFor != "" || l.Successor != "" || !l.Held || l.Holder != "c" {
		t.Fatalf("after c acquired: %+v", l)
	}
}
