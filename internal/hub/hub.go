// Package hub fans leadership events out to the watchers of each lease on
// this instance. Events come from this instance's own changes, from the
// Pub/Sub events of every instance and from the sweeper; a watcher may see
// one event twice and drops it by the order of notify.Newer.
package hub

import (
	"sync"
	"sync/atomic"

	"github.com/leasesvc/leasesvc/lease"
)

// Hub is safe for concurrent use. The zero value is not usable; call New.
type Hub struct {
	mu   sync.Mutex
	subs map[string]map[*Sub]struct{}
}

// New returns an empty Hub.
func New() *Hub { return &Hub{subs: map[string]map[*Sub]struct{}{}} }

// Sub is one watcher's subscription to one lease.
type Sub struct {
	// C delivers the lease's events. When the watcher falls too far behind,
	// events are dropped and Lagged reports it.
	C      chan lease.Event
	name   string
	lagged atomic.Bool
}

// Lagged reports, and clears, whether events were dropped since the last
// call; the watcher should then read the lease again.
func (s *Sub) Lagged() bool { return s.lagged.Swap(false) }

// Subscribe starts delivering the events of the lease name.
func (h *Hub) Subscribe(name string) *Sub {
	s := &Sub{C: make(chan lease.Event, 64), name: name}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[name] == nil {
		h.subs[name] = map[*Sub]struct{}{}
	}
	h.subs[name][s] = struct{}{}
	return s
}

// Unsubscribe stops delivering to s.
func (h *Hub) Unsubscribe(s *Sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs[s.name], s)
	if len(h.subs[s.name]) == 0 {
		delete(h.subs, s.name)
	}
}

// Publish delivers ev to every watcher of its lease without blocking.
func (h *Hub) Publish(ev lease.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[ev.Lease.Name] {
		select {
		case s.C <- ev:
		default:
			s.lagged.Store(true)
		}
	}
}

// Watchers returns how many subscriptions are open.
func (h *Hub) Watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.subs {
		n += len(m)
	}
	return n
}
