package client

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// EventType names a change of holding (docs/contract.md §5), or the state a watch
// stream starts with.
type EventType string

// The event types.
const (
	// EventAcquired: a new holding began.
	EventAcquired EventType = "acquired"
	// EventReleased: the holder released its holding.
	EventReleased EventType = "released"
	// EventExpired: a holding ran out and nobody took over.
	EventExpired EventType = "expired"
	// EventRevoked: an operator ended the holding (Client.Revoke); the
	// event's Reason and Operator say why and who. It ends a holding as
	// released does: the lease is not held after it, and it orders after
	// the acquired event of its token.
	EventRevoked EventType = "revoked"
	// EventDeleted: the lease, not held, was deleted (Client.Delete, or the
	// service's retention); it is not found until an acquire creates it
	// again with the next fencing token (docs/contract.md §15). It orders
	// after every other event of its token.
	EventDeleted EventType = "deleted"
	// EventState is not a change but the lease as it is now: the first
	// event of every watch stream, and again after a Stream reconnects. Its
	// Lease is zero (Name empty) when the lease never existed.
	EventState EventType = "lease"
)

// Event is one leadership event: the data of a Pub/Sub message of the
// service's events topic, or one event of a watch stream (docs/events.md).
type Event struct {
	// Type is the kind of change.
	Type EventType `json:"type"`
	// Lease is the full lease as of the event.
	Lease Lease `json:"lease"`
	// PreviousHolder names the holder of token − 1 on an acquired event with
	// token > 1.
	PreviousHolder string `json:"previousHolder,omitempty"`
	// PreviousExpired says, on an acquired event with token > 1, whether the
	// previous holding had run out rather than been released.
	PreviousExpired bool `json:"previousExpired,omitempty"`
	// Reason is, on a revoked event, the reason the operator gave; on a
	// deleted event, why the service deleted the lease ("retention"), empty
	// for a caller's delete.
	Reason string `json:"reason,omitempty"`
	// Operator is, on a revoked or deleted event, the principal who revoked
	// the holding or deleted the lease.
	Operator string `json:"operator,omitempty"`
	// Successor is, on a released event of a transfer (Client.Transfer),
	// the holder the lease was handed to (docs/contract.md §8). An event's
	// Lease never carries the checkpoint.
	Successor string `json:"successor,omitempty"`
	// Time is backend time: the decision's server time for acquired,
	// released and revoked, the holding's expire time for expired.
	Time time.Time `json:"eventTime"`
}

// ParseEvent parses the JSON of an event (a Pub/Sub message's data or a
// watch event's data line).
func ParseEvent(data []byte) (Event, error) {
	var ev Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return Event{}, fmt.Errorf("leasesvc event: %w", err)
	}
	switch ev.Type {
	case EventAcquired, EventReleased, EventExpired, EventRevoked, EventDeleted:
	default:
		return Event{}, fmt.Errorf("leasesvc event: unknown type %q", ev.Type)
	}
	if ev.Lease.Name == "" || ev.Lease.FencingToken < 1 {
		return Event{}, fmt.Errorf("leasesvc event %s: no lease name or token", ev.Type)
	}
	return ev, nil
}

// ID is the event's deterministic identity {name}/{fencingToken}/{type},
// the CloudEvents ce-id: a duplicated or retried event keeps it.
func (e Event) ID() string {
	return e.Lease.Name + "/" + strconv.FormatInt(e.Lease.FencingToken, 10) + "/" + string(e.Type)
}

// Newer reports whether event b comes after event a of the same lease in
// the order consumers use (docs/contract.md §5): by fencing token, and within one token
// acquired before released, expired or revoked, and those before deleted. A consumer keeps the newest
// event it has seen per lease and drops any event for which Newer(kept, ev)
// is false: duplicates and events that arrive late.
//
// EventState (a snapshot) ranks as the event that produced it: acquired
// while held, otherwise the end of the holding.
func Newer(a, b Event) bool {
	if a.Lease.FencingToken != b.Lease.FencingToken {
		return b.Lease.FencingToken > a.Lease.FencingToken
	}
	return rank(a) < rank(b)
}

// rank orders the events of one token: the start of a holding, then its
// end, then the deletion of the lease it left.
func rank(e Event) int {
	switch e.Type {
	case EventAcquired:
		return 0
	case EventState:
		if e.Lease.Held {
			return 0
		}
	case EventDeleted:
		return 2
	}
	return 1
}
