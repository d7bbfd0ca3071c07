package session

import (
	"context"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
)

// nopConn is a Conn that drops what it is told.
type nopConn struct{}

func (nopConn) Push(Push) {}

// heartbeatOnEnd makes every decision to end a session of kind send that
// session a heartbeat at once, and returns whether it was acked.
func heartbeatOnEnd(t *testing.T, kind endKind) <-chan bool {
	t.Helper()
	acked := make(chan bool, 1)
	f := func(s *Session, k endKind) {
		if k == kind {
			select {
			case acked <- s.Heartbeat(func() {}):
			default:
			}
		}
	}
	endDecided.Store(&f)
	t.Cleanup(func() { endDecided.Store(nil) })
	return acked
}

func registry(t *testing.T, m *lease.Manager) *Registry {
	t.Helper()
	r, err := New(Manager{M: m}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

func leaseManager(t *testing.T) *lease.Manager {
	t.Helper()
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func waitAck(t *testing.T, acked <-chan bool) bool {
	t.Helper()
	select {
	case a := <-acked:
		return a
	case <-time.After(20 * time.Second):
		t.Fatal("the session did not end in 20s")
		return false
	}
}

// TestNoAckOnceDeathDecided: a heartbeat that arrives after the death timer
// decided the session is dead is not acked: the instance is about to
// release the leases, sooner than a window after that heartbeat
// (docs/contract.md §14 death).
func TestNoAckOnceDeathDecided(t *testing.T) {
	acked := heartbeatOnEnd(t, endExpired)
	r := registry(t, leaseManager(t))
	s, _, err := r.Open(t.Context(), "c", "", MinWindow, nopConn{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h"}, nil); err != nil {
		t.Fatal(err)
	}
	if waitAck(t, acked) {
		t.Fatal("a heartbeat that arrived after the death was decided was acked, and the leases are released at once")
	}
}

// TestNoAckOnceMoved: once a lease's renewal found the session at a higher
// epoch (resumed elsewhere), no heartbeat is acked (docs/contract.md §14,
// S4).
func TestNoAckOnceMoved(t *testing.T) {
	acked := heartbeatOnEnd(t, endMoved)
	m := leaseManager(t)
	a, b := registry(t, m), registry(t, m)
	s, id, err := a.Open(t.Context(), "c", "", 60*time.Second, nopConn{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, _, _, err := b.Resume(t.Context(), "c", "", id, 2, 0, []Claim{{Name: "a", Holder: "h", FencingToken: l.FencingToken}}, nopConn{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	s.Kick() // the lease's renewal finds the session at epoch 2
	if waitAck(t, acked) {
		t.Fatal("a heartbeat was acked after the session's epoch compare-and-set failed")
	}
}
