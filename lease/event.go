package lease

import (
	"strconv"
	"time"
)

// EventType names a change of holding (docs/contract.md §5).
type EventType string

// The event types of docs/contract.md §5.
const (
	// EventAcquired: a new holding began.
	EventAcquired EventType = "acquired"
	// EventReleased: the holder released its holding.
	EventReleased EventType = "released"
	// EventExpired: a holding ran out and nobody took over.
	EventExpired EventType = "expired"
	// EventRevoked: an operator ended the holding (Revoke).
	EventRevoked EventType = "revoked"
	// EventDeleted: the lease, not held, was deleted (Delete); it is not
	// found from then on, until an acquire creates it again with the next
	// fencing token (docs/contract.md §15).
	EventDeleted EventType = "deleted"
)

// Event is one change of holding, reported through Config.OnChange.
type Event struct {
	// Type is the kind of change.
	Type EventType
	// Lease is the lease as of the event.
	Lease Lease
	// PreviousHolder names the holder of token − 1 on an acquired event;
	// empty for token 1.
	PreviousHolder string
	// PreviousExpired says, on an acquired event with a previous holding,
	// whether that holding had run out rather than been released.
	PreviousExpired bool
	// Time is backend time: the decision's server time for acquired,
	// released and revoked, the holding's expire time for expired.
	Time time.Time
	// Reason is, on a revoked event, the operator's reason; on a deleted
	// event, why the service deleted it ("" for a caller's delete); on a
	// released event, ReasonSessionExpired when the holding's session died
	// (ExpireSession), "" otherwise.
	Reason string
	// Operator is, on a revoked or deleted event, the principal who revoked
	// or deleted ("" without authentication, or the service itself).
	Operator string
	// Successor is, on a released event of a transfer, the holder the lease
	// was handed to (docs/contract.md §8).
	Successor string
	// Previous is, on an acquired event, the previous holding as it was
	// stored (zero for token 1); it is not part of the published event.
	Previous Lease
}

// changed reports a committed change to the observer and, when it ended a
// holding, wakes local waiters of the lease.
func (m *Manager) changed(ev Event) {
	if m.cfg.OnChange != nil {
		m.cfg.OnChange(ev)
	}
	if ev.Ends() {
		m.Wake(ev.Lease.Name)
	}
}

// Ends reports whether the event ended a holding (released, revoked,
// expired), which is what a waiting acquire waits for; a new holding
// (acquired) leaves the lease held, so waking waiters for it would only
// cost them a refused attempt.
func (e Event) Ends() bool { return e.Type != EventAcquired }

// Newer reports whether event b comes after event a of the same lease in
// the order consumers use (docs/contract.md §5): by fencing token, and within one token
// acquired before released, revoked or expired, and those before deleted
// (docs/contract.md §15).
func Newer(a, b Event) bool {
	if a.Lease.FencingToken != b.Lease.FencingToken {
		return b.Lease.FencingToken > a.Lease.FencingToken
	}
	return rankInToken(a.Type) < rankInToken(b.Type)
}

// rankInToken orders the events of one holding: its acquire, its end, the
// deletion of the lease it left.
func rankInToken(t EventType) int {
	switch t {
	case EventAcquired:
		return 0
	case EventDeleted:
		return 2
	}
	return 1
}

// ID is the event's deterministic identity, {name}/{fencingToken}/{type}
// (the CloudEvents ce-id): a retried or duplicated event keeps it.
func (e Event) ID() string {
	return e.Lease.Name + "/" + strconv.FormatInt(e.Lease.FencingToken, 10) + "/" + string(e.Type)
}
