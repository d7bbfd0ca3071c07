package hub

import (
	"strings"

	"github.com/leasesvc/leasesvc/lease"
)

// ring keeps the n most recent distinct events (by ID) in arrival order.
// An event that comes again while the ring still holds it (this instance's
// own change, then the same event from Pub/Sub) is not kept twice.
type ring struct {
	buf  []lease.Event
	next int // where the next event goes once buf is full
	ids  map[string]struct{}
}

func newRing(n int) ring {
	return ring{buf: make([]lease.Event, 0, n), ids: make(map[string]struct{}, n)}
}

func (r *ring) add(ev lease.Event) {
	if cap(r.buf) == 0 {
		return
	}
	id := ev.ID()
	if _, ok := r.ids[id]; ok {
		return
	}
	r.ids[id] = struct{}{}
	ev.Previous = lease.Lease{} // not part of the event as published; half the size
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, ev)
		return
	}
	delete(r.ids, r.buf[r.next].ID())
	r.buf[r.next] = ev
	r.next = (r.next + 1) % len(r.buf)
}

// under returns the kept events of leases under prefix, oldest first.
func (r *ring) under(prefix string) []lease.Event {
	var out []lease.Event
	for i := range r.buf {
		ev := r.buf[(r.next+i)%len(r.buf)]
		if strings.HasPrefix(ev.Lease.Name, prefix) {
			out = append(out, ev)
		}
	}
	return out
}
