package lease

import (
	"strconv"
	"strings"
)

// ParseEventID reads id, an Event.ID of the lease name ({name}/{fencingToken}/{type}),
// back into an Event that carries what Newer compares: its type, the
// lease's name and its fencing token. ok is false for an id of another
// shape or of another lease. A stream resumed from Last-Event-ID uses it to
// find the events that came after the one its client saw.
func ParseEventID(name, id string) (ev Event, ok bool) {
	rest, ok := strings.CutPrefix(id, name+"/")
	if !ok {
		return Event{}, false
	}
	tok, typ, ok := strings.Cut(rest, "/")
	n, err := strconv.ParseInt(tok, 10, 64)
	if !ok || err != nil || n < 1 {
		return Event{}, false
	}
	ev = Event{Type: EventType(typ)}
	ev.Lease.Name, ev.Lease.FencingToken = name, n
	return ev, true
}
