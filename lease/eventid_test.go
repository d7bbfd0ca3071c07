package lease_test

import (
	"testing"

	"github.com/leasesvc/leasesvc/lease"
)

// TestParseEventID: an event's ID reads back into its type, name and
// fencing token, for a one-letter and a dotted name; an id of another shape or
// another lease reads as nothing.
func TestParseEventID(t *testing.T) {
	for _, name := range []string{"a", "team-a.scheduler"} {
		ev := lease.Event{Type: lease.EventReleased}
		ev.Lease.Name, ev.Lease.FencingToken = name, 42
		got, ok := lease.ParseEventID(name, ev.ID())
		if !ok || got.Type != ev.Type || got.Lease.Name != name || got.Lease.FencingToken != 42 {
			t.Errorf("ParseEventID(%q, %q) = %+v, %v; want the event's type, name and token", name, ev.ID(), got, ok)
		}
	}
	for _, id := range []string{"", "a", "a/", "a/7", "a/x/acquired", "a/0/acquired", "a/-1/acquired", "b/7/acquired", "ab/7/acquired"} {
		if got, ok := lease.ParseEventID("a", id); ok {
			t.Errorf("ParseEventID(%q, %q) = %+v, true; want false", "a", id, got)
		}
	}
}
