package wire

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// Event is the JSON of a leadership event (docs/contract.md §5), version 1 of the
// schema in docs/events.md: the data of a Pub/Sub message and of a watch
// stream's change events.
type Event struct {
	Type            string  `json:"type"`
	Lease           Lease   `json:"lease"`
	PreviousHolder  *string `json:"previousHolder,omitempty"`
	PreviousExpired *bool   `json:"previousExpired,omitempty"`
	Reason          string  `json:"reason,omitempty"`
	Operator        string  `json:"operator,omitempty"`
	Successor       string  `json:"successor,omitempty"`
	EventTime       string  `json:"eventTime"`
}

// FromEvent returns the wire form of ev. previousHolder and previousExpired
// are present on an acquired event with a previous holding only; reason
// and operator on a revoked event and a deleted one only (operator when
// authentication is on; a deleted event's reason when the service deleted
// by retention), and reason on a released event whose session died
// ("session_expired", docs/contract.md §14).
func FromEvent(ev lease.Event) Event {
	out := Event{Type: string(ev.Type), Lease: FromLease(ev.Lease), EventTime: FormatTime(ev.Time)}
	out.Lease.Checkpoint = nil // the next holder's to read; events stay small
	if ev.Type == lease.EventReleased {
		out.Successor = ev.Successor
		if ev.Reason == lease.ReasonSessionExpired { // the one reason a release has
			out.Reason = ev.Reason
		}
	}
	if ev.Type == lease.EventRevoked || ev.Type == lease.EventDeleted {
		out.Reason, out.Operator = ev.Reason, ev.Operator
	}
	if ev.Type == lease.EventAcquired && ev.Lease.FencingToken > 1 && ev.PreviousHolder != "" {
		prev, expired := ev.PreviousHolder, ev.PreviousExpired
		out.PreviousHolder, out.PreviousExpired = &prev, &expired
	}
	return out
}

// MarshalEvent returns the JSON of ev.
func MarshalEvent(ev lease.Event) ([]byte, error) {
	b, err := Marshal(FromEvent(ev))
	if err != nil {
		return nil, fmt.Errorf("wire: marshal %s event of %q: %w", ev.Type, ev.Lease.Name, err)
	}
	return b, nil
}

// UnmarshalEvent parses the JSON of an event.
func UnmarshalEvent(data []byte) (lease.Event, error) {
	var body Event
	if err := json.Unmarshal(data, &body); err != nil {
		return lease.Event{}, fmt.Errorf("wire: event: %w", err)
	}
	l, err := body.Lease.ToLease()
	if err != nil {
		return lease.Event{}, fmt.Errorf("wire: event: %w", err)
	}
	ev := lease.Event{Type: lease.EventType(body.Type), Lease: l}
	switch ev.Type {
	case lease.EventAcquired, lease.EventExpired:
	case lease.EventReleased:
		ev.Successor = body.Successor
		if body.Reason == lease.ReasonSessionExpired {
			ev.Reason = body.Reason
		}
	case lease.EventRevoked, lease.EventDeleted:
		ev.Reason, ev.Operator = body.Reason, body.Operator
	default:
		return lease.Event{}, fmt.Errorf("wire: event: unknown type %q", body.Type)
	}
	if body.PreviousHolder != nil {
		ev.PreviousHolder = *body.PreviousHolder
	}
	if body.PreviousExpired != nil {
		ev.PreviousExpired = *body.PreviousExpired
	}
	if ev.Time, err = time.Parse(time.RFC3339Nano, body.EventTime); err != nil {
		return lease.Event{}, fmt.Errorf("wire: event: eventTime: %w", err)
	}
	return ev, nil
}
