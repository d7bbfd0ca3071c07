package httpapi

import (
	"net/http"

	"github.com/leasesvc/leasesvc/lease"
)

// replayLease sends, on a lease's :watch stream resumed with Last-Event-ID
// (an id the stream sent: {name}/{token}/{type}), the events of the lease
// after that one that this instance keeps (hub.Hub.Recent), in order. An id
// of another shape, or of another lease, replays nothing: the stream's
// first state event then sums up what was missed.
func (a *api) replayLease(s *stream, r *http.Request, name string) {
	seen, ok := lease.ParseEventID(name, r.Header.Get("Last-Event-ID"))
	if !ok {
		return
	}
	for _, ev := range a.cfg.Events.Recent(name) {
		if ev.Lease.Name == name && lease.Newer(seen, ev) {
			s.event(ev)
			seen = ev
		}
	}
}
