// Package notify carries leadership events (docs/contract.md §5) between
// the service's instances, to wake waiting acquires and watchers, through
// one Transport: PubSub over Cloud Pub/Sub, or Notifier over the backend's
// own notifications (backend.Notifier) when there is no topic. On Pub/Sub,
// Publisher sends them from a bounded buffer, retried until delivered, and
// never fails or undoes the lease operation that caused them; Listen
// receives them on each service instance.
//
// Each message is a CloudEvent in Pub/Sub binary mode: the JSON event as
// data, the ce-* attributes, and the lease name as ordering key. Pub/Sub
// orders per publisher only and several instances publish, so consumers
// order by (fencingToken, acquired < released|expired) and drop what is
// older than what they have seen; ce-id ({name}/{token}/{type}) is the same
// for a retried or duplicated publish.
package notify

import (
	"fmt"
	"strconv"

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

// CEType returns the ce-type of an event type.
func CEType(t lease.EventType) string { return typePrefix + string(t) + typeSuffix }

// CEID returns the deterministic ce-id of an event.
func CEID(ev lease.Event) string { return ev.ID() }

// Encode returns the Pub/Sub message of an event.
func Encode(ev lease.Event) (Message, error) {
	data, err := wire.MarshalEvent(ev)
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
			"ce-time":        wire.FormatTime(ev.Time),
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
	ev, err := wire.UnmarshalEvent(data)
	if err != nil {
		return lease.Event{}, fmt.Errorf("notify: decode: %w", err)
	}
	return ev, nil
}
