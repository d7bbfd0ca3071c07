package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
)

// relayQueue is how many changes of holding may wait to be relayed; past
// it a change is not relayed (logged): other instances then learn it from
// the next change of that lease, a read, or their waiters' expiry timers.
const relayQueue = 4096

// relay carries this instance's changes of holding to the other instances
// through the backend's own notifications (backend.Notifier) when no
// Pub/Sub topic is set, and hands theirs to this instance's waiters and
// watchers: what Pub/Sub does otherwise (docs/contract.md §6, §10).
type relay struct {
	n    backend.Notifier
	from string // this instance, to skip its own messages
	log  *slog.Logger

	mu     sync.Mutex
	closed bool
	out    chan lease.Event
	done   chan struct{}
}

// relayMsg is one notification: an event and the instance it comes from.
type relayMsg struct {
	From  string          `json:"from"`
	Event json.RawMessage `json:"event"`
}

// newRelay starts the sender of n's relay; close stops it.
func newRelay(n backend.Notifier, from string, log *slog.Logger) *relay {
	r := &relay{n: n, from: from, log: log, out: make(chan lease.Event, relayQueue), done: make(chan struct{})}
	go r.send()
	return r
}

// publish queues ev for the other instances; it never blocks.
func (r *relay) publish(ev lease.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	select {
	case r.out <- ev:
	default:
		r.log.Warn("events: relay queue full: a change is not relayed", "lease", ev.Lease.Name, "event", ev.ID())
	}
}

// send notifies each queued event, in order, until close.
func (r *relay) send() {
	defer close(r.done)
	for ev := range r.out {
		payload, err := r.encode(ev)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = r.n.Notify(ctx, payload)
			cancel()
		}
		if err != nil {
			r.log.Warn("events: relay failed", "lease", ev.Lease.Name, "event", ev.ID(), "err", err)
		}
	}
}

// encode is ev's notification. An event too large for a notification goes
// without its lease's metadata (docs/backends.md says so).
func (r *relay) encode(ev lease.Event) (string, error) {
	for _, strip := range []bool{false, true} {
		if strip {
			ev.Lease.Metadata = nil
		}
		data, err := wire.MarshalEvent(ev)
		if err != nil {
			return "", err
		}
		msg, err := wire.Marshal(relayMsg{From: r.from, Event: data})
		if err != nil {
			return "", fmt.Errorf("relay: %w", err)
		}
		if len(msg) <= backend.MaxNotification {
			return string(msg), nil
		}
	}
	return "", fmt.Errorf("relay: event %s: over %d bytes even without metadata", ev.ID(), backend.MaxNotification)
}

// listen calls handle with each event another instance relays, and wake
// with the name of each lease whose holding a write through any instance
// ended (backend.EndedNotification, sent at that write's commit), until
// ctx is done.
func (r *relay) listen(ctx context.Context, handle func(lease.Event), wake func(name string)) error {
	return r.n.Listen(ctx, func(payload string) {
		if name, ok := strings.CutPrefix(payload, backend.EndedNotification); ok {
			wake(name)
			return
		}
		var msg relayMsg
		if err := json.Unmarshal([]byte(payload), &msg); err != nil {
			r.log.Warn("events: a relayed message that is not one", "err", err)
			return
		}
		if msg.From == r.from {
			return // this instance's own: its watchers have it
		}
		ev, err := wire.UnmarshalEvent(msg.Event)
		if err != nil {
			r.log.Warn("events: a relayed event that is not one", "from", msg.From, "err", err)
			return
		}
		handle(ev)
	})
}

// close relays what is queued, until ctx is done.
func (r *relay) close(ctx context.Context) {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.out)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		r.log.Warn("events: relay not flushed in time", "err", ctx.Err())
	}
}
