package leadercache_test

import (
	"testing"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/leadercache"
)

// TestRevokedEndsTheHolding: a revoked event ends the holding as released
// does; an acquired event of the same token that arrives late is dropped,
// and the next holding (token + 1) is news again.
func TestRevokedEndsTheHolding(t *testing.T) {
	c, err := leadercache.New(service(t), nil, leadercache.Config{})
	if err != nil {
		t.Fatal(err)
	}
	revoked := event(client.EventRevoked, "a", 3)
	revoked.Lease.RevokedBy, revoked.Lease.RevokeReason = "ops@example.com", "stuck"
	revoked.Reason, revoked.Operator = "stuck", "ops@example.com"
	for i, step := range []struct {
		ev      client.Event
		applied bool
		held    bool
		source  string
	}{
		{event(client.EventAcquired, "a", 3), true, true, "acquired"},
		{revoked, true, false, "revoked"},
		{event(client.EventAcquired, "a", 3), false, false, "revoked"}, // late
		{event(client.EventReleased, "a", 3), false, false, "revoked"}, // the same end, told again
		{event(client.EventAcquired, "b", 4), true, true, "acquired"},
		{event(client.EventRevoked, "a", 3), false, true, "acquired"}, // late: an older token
	} {
		if got := c.Apply(step.ev); got != step.applied {
			t.Fatalf("step %d: Apply(%s) = %v, want %v", i, step.ev.ID(), got, step.applied)
		}
		l, _ := c.Peek("jobs")
		if l.Held != step.held || l.Source != step.source {
			t.Fatalf("step %d (%s): entry held %v from %q, want held %v from %q", i, step.ev.ID(), l.Held, l.Source, step.held, step.source)
		}
		if i == 1 && (l.Holder != "a" || l.FencingToken != 3 || l.Lease.RevokedBy != "ops@example.com") {
			t.Fatalf("after the revoke: %+v", l)
		}
	}
}
