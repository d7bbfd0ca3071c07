package notify

import (
	"context"
	"errors"

	"github.com/leasesvc/leasesvc/lease"
)

// Transport carries the changes of holding made on one service instance
// to the others (docs/contract.md §5, §6): PubSub over a Cloud Pub/Sub
// topic, Notifier over the backend's own notifications (backend.Notifier).
// Its methods are safe for concurrent use.
type Transport interface {
	// Publish queues ev for the other instances and returns at once: it
	// never blocks, fails or undoes the lease operation that caused ev. It
	// returns ErrDropped when ev will not be sent (the queue is full, or
	// the Transport is closing).
	Publish(ev lease.Event) error
	// Subscribe hands h what the other instances publish, until ctx is
	// done; it then returns nil. Failures are logged and retried inside.
	Subscribe(ctx context.Context, h Handler) error
	// Close stops accepting events and sends the queued ones until ctx is
	// done, then releases what the Transport holds.
	Close(ctx context.Context) error
}

// ErrDropped is Publish's answer for an event that will not be sent.
var ErrDropped = errors.New("notify: event dropped")

// Handler receives what a Transport carries to this instance. Its
// functions must not block for long.
type Handler struct {
	// Event gets each change of holding published through another
	// instance (PubSub: any instance), possibly more than once and out of
	// order (see lease.Newer).
	Event func(lease.Event)
	// Ended, if set, gets the name of each lease whose holding a write
	// through any instance ended, at that write's commit, before the
	// writer has answered (backend.EndedNotification). Only a Notifier
	// whose backend sends such notices calls it.
	Ended func(name string)
}
