package notify

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

// Notifier is the Transport over a backend's own notifications
// (backend.Notifier, PostgreSQL's LISTEN/NOTIFY), for a service without a
// Pub/Sub topic: it carries this instance's changes of holding to the
// other instances and hands theirs, and the backend's ended notices, to
// this instance's waiters and watchers: what PubSub does otherwise
// (docs/contract.md §6, §10).
type Notifier struct {
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

// NewNotifier returns the Transport over n for the instance named from
// (its own messages come back through n and are skipped), logging to log
// (nil: slog.Default()). It starts the sender; Close stops it.
func NewNotifier(n backend.Notifier, from string, log *slog.Logger) *Notifier {
	if log == nil {
		log = slog.Default()
	}
	r := &Notifier{n: n, from: from, log: log, out: make(chan lease.Event, relayQueue), done: make(chan struct{})}
	go r.send()
	return r
}

// Publish implements Transport.Publish.
func (r *Notifier) Publish(ev lease.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrDropped
	}
	select {
	case r.out <- ev:
		return nil
	default:
		r.log.Warn("events: relay queue full: a change is not relayed", "lease", ev.Lease.Name, "event", ev.ID())
		return ErrDropped
	}
}

// send notifies each queued event, in order, until close.
func (r *Notifier) send() {
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
func (r *Notifier) encode(ev lease.Event) (string, error) {
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

// Subscribe implements Transport.Subscribe: h.Event gets each event
// another instance relays, and h.Ended the name of each lease whose
// holding a write through any instance ended (backend.EndedNotification,
// sent at that write's commit).
func (r *Notifier) Subscribe(ctx context.Context, h Handler) error {
	r.log.Info("events: relayed through the backend's notifications")
	err := r.n.Listen(ctx, func(payload string) {
		if name, ok := strings.CutPrefix(payload, backend.EndedNotification); ok {
			if h.Ended != nil {
				h.Ended(name)
			}
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
		h.Event(ev)
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Close implements Transport.Close: it relays what is queued, until ctx is
// done (then logs what it could not).
func (r *Notifier) Close(ctx context.Context) error {
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
	return nil
}
