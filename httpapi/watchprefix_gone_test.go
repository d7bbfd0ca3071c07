package httpapi

import (
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// TestPrefixStreamGone: after dropped events the stream lists the leases
// again; one it showed that is not listed any more was deleted, and gets
// one deleted event (docs/contract.md §15), once.
func TestPrefixStreamGone(t *testing.T) { synctest.Test(t, prefixStreamGone) }

// prefixStreamGone is TestPrefixStreamGone's body, run in a synctest bubble: fake time.
func prefixStreamGone(t *testing.T) {
	w := httptest.NewRecorder()
	a := &api{log: slog.New(slog.DiscardHandler), stopCtx: t.Context(),
		cfg: Config{Limits: Limits{StreamLifetime: time.Minute, WriteTimeout: time.Minute, StreamBuffer: 1 << 20}}}
	s := a.openStream(w, httptest.NewRequest("GET", "/v1/leases:watch", nil), nil)
	defer s.close()
	ps := &prefixStream{s: s, last: map[string]lease.Event{},
		held: map[string]*heldBack{}, readable: func(string) bool { return true }}
	at := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	kept := lease.Lease{Record: lease.Record{Name: "team-a.kept", Holder: "a", FencingToken: 1, ExpireTime: at}, ServerTime: at}
	old := lease.Lease{Record: lease.Record{Name: "team-a.old", Holder: "b", FencingToken: 3, ExpireTime: at}, ServerTime: at}
	ps.snapshot(kept)
	ps.snapshot(old)
	ps.gone(map[string]bool{kept.Name: true})
	ps.gone(map[string]bool{kept.Name: true})
	drained(t, s)
	out := w.Body.String()
	if n := strings.Count(out, "event: deleted"); n != 1 || !strings.Contains(out, `"name":"team-a.old"`) {
		t.Fatalf("stream:\n%s\nwant one deleted event, of team-a.old", out)
	}
	if ps.last["team-a.old"].Type != lease.EventDeleted || ps.last["team-a.kept"].Type == lease.EventDeleted {
		t.Fatalf("last events %+v", ps.last)
	}
}

// drained fails the test unless the stream's writer has written all that
// was queued once the test's synctest bubble is idle.
func drained(t *testing.T, s *stream) {
	t.Helper()
	synctest.Wait()
	s.mu.Lock()
	n, err := s.queued, s.err
	s.mu.Unlock()
	if err != nil || n != 0 {
		t.Fatalf("the stream's writer idle with %d bytes queued, error %v", n, err)
	}
}
