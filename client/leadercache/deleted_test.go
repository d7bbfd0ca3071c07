package leadercache_test

import (
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/leadercache"
)

// TestDeletedDropsTheEntry: after a deleted event the entry answers as for
// a lease that never existed; late events of the deleted holding are
// dropped, and the next holding is news again (docs/contract.md §15).
func TestDeletedDropsTheEntry(t *testing.T) {
	c, err := leadercache.New(service(t), nil, leadercache.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		ev      client.Event
		applied bool
		holder  string
	}{
		{event(client.EventAcquired, "a", 3), true, "a"},
		{event(client.EventReleased, "a", 3), true, "a"},
		{event(client.EventDeleted, "a", 3), true, ""},
		{event(client.EventExpired, "a", 3), false, ""}, // late
		{event(client.EventAcquired, "b", 4), true, "b"},
	} {
		if got := c.Apply(step.ev); got != step.applied {
			t.Fatalf("step %d: Apply(%s) = %v, want %v", i, step.ev.ID(), got, step.applied)
		}
		if l, ok := c.Peek("jobs"); !ok || l.Holder != step.holder {
			t.Fatalf("step %d (%s): entry %+v, want holder %q", i, step.ev.ID(), l, step.holder)
		}
	}
}

// TestRereadFindsDeleted: a re-read that finds a lease gone, whose holding
// the cache saw end, drops the entry even when the deleted event was
// missed.
func TestRereadFindsDeleted(t *testing.T) {
	svc := service(t)
	ctx := t.Context()
	a, err := svc.Acquire(ctx, "jobs", client.AcquireRequest{Holder: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c, err := leadercache.New(svc, nil, leadercache.Config{TTL: time.Nanosecond}) // every Leader call reads
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Release(ctx, "jobs", "a", a.FencingToken); err != nil {
		t.Fatal(err)
	}
	if l, err := c.Leader(ctx, "jobs"); err != nil || l.Holder != "a" || l.Held {
		t.Fatalf("Leader after the release = %+v, %v; want a, not held", l, err)
	}
	if _, err := svc.Delete(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	if l, err := c.Leader(ctx, "jobs"); err != nil || l.Holder != "" || l.FencingToken != 0 {
		t.Fatalf("Leader after the delete = %+v, %v; want no holder", l, err)
	}
	if c.Apply(event(client.EventReleased, "a", 1)) {
		t.Fatal("a late event of the deleted holding was applied")
	}
}
