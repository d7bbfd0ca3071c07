package httpapi

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// replayLease sends, on a lease's :watch stream resumed with Last-Event-ID
// (an id the stream sent: {name}/{token}/{type}), the events of the lease
// after that one that this instance keeps (hub.Hub.Recent), in order. An id
// of another shape, or of another lease, replays nothing: the stream's
// first state event then sums up what was missed.
func (a *api) replayLease(s *stream, r *http.Request, name string) {
	id := r.Header.Get("Last-Event-ID")
	rest, ok := strings.CutPrefix(id, name+"/")
	if !ok {
		return
	}
	tok, typ, ok := strings.Cut(rest, "/")
	n, err := strconv.ParseInt(tok, 10, 64)
	if !ok || err != nil || n < 1 {
		return
	}
	seen := lease.Event{Type: lease.EventType(typ), Lease: lease.Lease{Record: backend.Record{Name: name, FencingToken: n}}}
	for _, ev := range a.cfg.Events.Recent(name) {
		if ev.Lease.Name == name && lease.Newer(seen, ev) {
			s.event(ev)
			seen = ev
		}
	}
}
