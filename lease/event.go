package lease

import "time"

// EventType names a change of holding (SPEC §5).
type EventType string

// The event types of SPEC §5.
const (
	// EventAcquired: a new holding began.
	EventAcquired EventType = "acquired"
	// EventReleased: the holder released its holding.
	EventReleased EventType = "released"
	// EventExpired: a holding ran out and nobody took over.
	EventExpired EventType = "expired"
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
	// Time is backend time: the decision's server time for acquired and
	// released, the holding's expire time for expired.
	Time time.Time
}

// changed reports a committed change to the observer and wakes local
// waiters of the lease.
func (m *Manager) changed(ev Event) {
	if m.cfg.OnChange != nil {
		m.cfg.OnChange(ev)
	}
	m.Wake(ev.Lease.Name)
}
