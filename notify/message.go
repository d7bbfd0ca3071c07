// Package notify carries leadership events (SPEC §5) over Cloud Pub/Sub:
// Publisher sends them from a bounded buffer, retried until delivered, and
// never fails or undoes the lease operation that caused them; Listen
// receives them on each service instance, to wake waiting acquires and
// watchers.
//
// Each message is a CloudEvent in Pub/Sub binary mode: the JSON event as
// data, the ce-* attributes, and the lease name as ordering key. Pub/Sub
// orders per publisher only and several instances publish, so consumers
// order by (fencingToken, acquired < released|expired) and drop what is
// older than what they have seen; ce-id ({name}/{token}/{type}) is the same
// for a retried or duplicated publish.
package notify

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
)

// CloudEvents attributes and values of a leadership event.
const (
	SpecVersion = "1.0"
	typePrefix  = "dev.leasesvc.lease."
	typeSuffix  = ".v1"
)

// Message is a Pub/Sub message before it is sent.
type Message struct {
	// Data is the JSON event.
	Data []byte
	// Attributes are the CloudEvents binary-mode attributes plus lease,
	// fencingToken and holder.
	Attributes map[string]string
	// OrderingKey is the lease name.
	OrderingKey string
}

// eventJSON is the data of a message: version 1 of the event schema
// (docs/events.md).
type eventJSON struct {
	Type            string     `json:"type"`
	Lease           wire.Lease `json:"lease"`
	PreviousHolder  *string    `json:"previousHolder,omitempty"`
	PreviousExpired *bool      `json:"previousExpired,omitempty"`
	EventTime       string     `json:"eventTime"`
}

// CEType returns the ce-type of an event type.
func CEType(t lease.EventType) string { return typePrefix + string(t) + typeSuffix }

// CEID returns the deterministic ce-id of an event.
func CEID(ev lease.Event) string {
	return ev.Lease.Name + "/" + strconv.FormatInt(ev.Lease.FencingToken, 10) + "/" + string(ev.Type)
}

// Encode returns the Pub/Sub message of an event.
func Encode(ev lease.Event) (Message, error) {
	body := eventJSON{Type: string(ev.Type), Lease: wire.FromLease(ev.Lease), EventTime: wire.FormatTime(ev.Time)}
	if ev.Type == lease.EventAcquired && ev.Lease.FencingToken > 1 {
		prev, expired := ev.PreviousHolder, ev.PreviousExpired
		body.PreviousHolder, body.PreviousExpired = &prev, &expired
	}
	data, err := json.Marshal(body)
	if err != nil {
		return Message{}, fmt.Errorf("notify: encode %s: %w", CEID(ev), err)
	}
	return Message{
		Data: data,
		Attributes: map[string]string{
			"ce-specversion": SpecVersion,
			"ce-type":        CEType(ev.Type),
			"ce-source":      "/leases/" + ev.Lease.Name,
			"ce-id":          CEID(ev),
			"ce-time":        body.EventTime,
			"content-type":   "application/json",
			"lease":          ev.Lease.Name,
			"fencingToken":   strconv.FormatInt(ev.Lease.FencingToken, 10),
			"holder":         ev.Lease.Holder,
		},
		OrderingKey: ev.Lease.Name,
	}, nil
}

// Decode parses the data of a message back into an event.
func Decode(data []byte) (lease.Event, error) {
	var body eventJSON
	if err := json.Unmarshal(data, &body); err != nil {
		return lease.Event{}, fmt.Errorf("notify: decode event: %w", err)
	}
	l, err := body.Lease.ToLease()
	if err != nil {
		return lease.Event{}, fmt.Errorf("notify: decode event: %w", err)
	}
	ev := lease.Event{Type: lease.EventType(body.Type), Lease: l}
	switch ev.Type {
	case lease.EventAcquired, lease.EventReleased, lease.EventExpired:
	default:
		return lease.Event{}, fmt.Errorf("notify: decode event: unknown type %q", body.Type)
	}
	if body.PreviousHolder != nil {
		ev.PreviousHolder = *body.PreviousHolder
	}
	if body.PreviousExpired != nil {
		ev.PreviousExpired = *body.PreviousExpired
	}
	if ev.Time, err = time.Parse(time.RFC3339Nano, body.EventTime); err != nil {
		return lease.Event{}, fmt.Errorf("notify: decode event: eventTime: %w", err)
	}
	return ev, nil
}
