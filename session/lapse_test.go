package session_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/internal/audit"
	"github.com/leasesvc/leasesvc/session"
)

// syncBuffer is a bytes.Buffer safe for the registry's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ends is an Observer that records the kinds of the ends.
type ends struct {
	mu    sync.Mutex
	kinds []string
}

func (*ends) SessionsOpen(int64)    {}
func (*ends) Heartbeat()            {}
func (*ends) ExpiredReleases(int64) {}
func (*ends) Resume()               {}

func (e *ends) SessionEnded(kind string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.kinds = append(e.kinds, kind)
}

func (e *ends) got() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.kinds...)
}

// TestLapseAuditedAsLapse: a session whose record ran out is audited as
// what it is (session_lapse, "its record ran out"), not as a session that
// sent no heartbeat for its window, and the Observer hears its end as
// "lapsed"; a close is audited and observed as a close (docs/contract.md
// §14, Session states).
func TestLapseAuditedAsLapse(t *testing.T) { synctest.Test(t, lapseAuditedAsLapse) }

func lapseAuditedAsLapse(t *testing.T) {
	m := manager(t, memory.New())
	clock := &offsetClock{}
	var log syncBuffer
	obs := &ends{}
	cfg := session.Config{Clock: clock, Audit: audit.New(slog.New(slog.NewJSONHandler(&log, nil))), Observer: obs}
	r := newRegistry(t, lapsedRecord{session.Manager{M: m}}, cfg)
	s, _, _ := openHolding(t, r, session.MinWindow, "x")
	clock.off.Store(int64(r.Config().RecordTTL(session.MinWindow) / 3)) // the record's renewal is due
	s.Kick()
	synctest.Wait()
	elapse(session.MinWindow) // the lapse's window: then its leases are expired
	out := log.String()
	if !strings.Contains(out, `"action":"session_lapse"`) || !strings.Contains(out, "its record ran out") {
		t.Errorf("no session_lapse audit line naming the record run out:\n%s", out)
	}
	if strings.Contains(out, `"action":"session_expire"`) {
		t.Errorf("a lapse audited as an expiry (no heartbeat for the window):\n%s", out)
	}
	if got := obs.got(); len(got) != 1 || got[0] != "lapsed" {
		t.Fatalf("Observer.SessionEnded got %v; want [lapsed]", got)
	}

	s2, _, _ := openHolding(t, r, session.MinWindow, "y")
	if err := s2.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := obs.got(); len(got) != 2 || got[1] != "closed" {
		t.Fatalf("Observer.SessionEnded got %v; want [lapsed closed]", got)
	}
	if !strings.Contains(log.String(), `"action":"session_close"`) {
		t.Errorf("no session_close audit line:\n%s", log.String())
	}
}
