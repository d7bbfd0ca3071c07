package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// TestPrefixStreamGone: after dropped events the stream lists the leases
// again; one it showed that is not listed any more was deleted, and gets
// one deleted event (docs/contract.md §15), once.
func TestPrefixStreamGone(t *testing.T) {
	w := httptest.NewRecorder()
	ps := &prefixStream{s: &stream{w: w, rc: http.NewResponseController(w)}, last: map[string]lease.Event{},
		held: map[string]*heldBack{}, readable: func(string) bool { return true }}
	at := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	kept := lease.Lease{Record: backend.Record{Name: "team-a.kept", Holder: "a", FencingToken: 1, ExpireTime: at}, ServerTime: at}
	old := lease.Lease{Record: backend.Record{Name: "team-a.old", Holder: "b", FencingToken: 3, ExpireTime: at}, ServerTime: at}
	ps.snapshot(kept)
	ps.snapshot(old)
	ps.gone([]lease.Lease{kept})
	ps.gone([]lease.Lease{kept})
	out := w.Body.String()
	if n := strings.Count(out, "event: deleted"); n != 1 || !strings.Contains(out, `"name":"team-a.old"`) {
		t.Fatalf("stream:\n%s\nwant one deleted event, of team-a.old", out)
	}
	if ps.last["team-a.old"].Type != lease.EventDeleted || ps.last["team-a.kept"].Type == lease.EventDeleted {
		t.Fatalf("last events %+v", ps.last)
	}
}
