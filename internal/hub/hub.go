// Package hub fans leadership events out to the watchers of each lease on
// this instance, and to the watchers of a name prefix. Events come from
// this instance's own changes, from the Pub/Sub events of every instance
// and from the sweeper; a watcher may see one event twice and drops it by
// the order of lease.Newer. The hub also keeps the most recent events in a
// bounded ring (see Recent), which prefix streams replay on resume and as
// history.
package hub

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/leasesvc/leasesvc/lease"
)

// Hub is safe for concurrent use. The zero value is not usable; call New.
type Hub struct {
	mu       sync.Mutex
	subs     map[string]map[*Sub]struct{}
	prefixes map[*Sub]struct{} // subscriptions to a prefix; Sub.name is the prefix
	ring     ring
}

// DefaultRecent is the number of recent events a Hub from New keeps.
const DefaultRecent = 2048

// New returns an empty Hub that keeps the DefaultRecent most recent events.
func New() *Hub { return NewWithRecent(DefaultRecent) }

// NewWithRecent returns an empty Hub that keeps the n most recent distinct
// events (n ≥ 0; 0 keeps none).
func NewWithRecent(n int) *Hub {
	return &Hub{subs: map[string]map[*Sub]struct{}{}, prefixes: map[*Sub]struct{}{}, ring: newRing(max(n, 0))}
}

// Sub is one watcher's subscription to one lease.
type Sub struct {
	// C delivers the lease's events. When the watcher falls too far behind,
	// events are dropped and Lagged reports it.
	C      chan lease.Event
	name   string
	prefix bool
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

// SubscribePrefix starts delivering the events of every lease whose name
// starts with prefix, and returns, taken at the same instant, the recent
// events of those leases that the hub keeps, oldest first: every event is
// either in that slice or delivered to the subscription (or both, for an
// event that came twice). Its buffer is larger than a lease's, since it
// serves many leases.
func (h *Hub) SubscribePrefix(prefix string) (*Sub, []lease.Event) {
	return h.SubscribePrefixBuffer(prefix, 1024)
}

// SubscribePrefixBuffer is SubscribePrefix with a buffer of n ≥ 1 events.
// Each place of the buffer costs a lease.Event (≈ 0.9 KiB) from the start,
// used or not: 1,024 of them are ≈ 0.9 MiB, what a :watch stream must not
// hold per client (docs/contract.md §16); a subscriber that drains C
// promptly needs few, and one that falls behind learns it from Lagged.
func (h *Hub) SubscribePrefixBuffer(prefix string, n int) (*Sub, []lease.Event) {
	s := &Sub{C: make(chan lease.Event, max(n, 1)), name: prefix, prefix: true}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prefixes[s] = struct{}{}
	return s, h.ring.under(prefix)
}

// Recent returns the recent events the hub keeps of the leases whose names
// start with prefix, oldest first (in the order they reached the hub).
func (h *Hub) Recent(prefix string) []lease.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ring.under(prefix)
}

// Unsubscribe stops delivering to s.
func (h *Hub) Unsubscribe(s *Sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.prefix {
		delete(h.prefixes, s)
		return
	}
	delete(h.subs[s.name], s)
	if len(h.subs[s.name]) == 0 {
		delete(h.subs, s.name)
	}
}

// Publish delivers ev to every watcher of its lease without blocking.
func (h *Hub) Publish(ev lease.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ring.add(ev)
	for s := range h.subs[ev.Lease.Name] {
		s.send(ev)
	}
	for s := range h.prefixes {
		if strings.HasPrefix(ev.Lease.Name, s.name) {
			s.send(ev)
		}
	}
}

func (s *Sub) send(ev lease.Event) {
	select {
	case s.C <- ev:
	default:
		s.lagged.Store(true)
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
	return n + len(h.prefixes)
}
