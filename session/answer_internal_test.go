package session

import (
	"context"
	"testing"

	"github.com/leasesvc/leasesvc/lease"
)

// TestAnswerQueuedWithTheTable: an acquire's answer is queued under the
// session's lock with the lease already in the table (docs/contract.md
// §14, S6): no push about the lease, and no ack decided without it, can
// come between.
func TestAnswerQueuedWithTheTable(t *testing.T) {
	r := registry(t, leaseManager(t))
	s, _, err := r.Open(t.Context(), "c", "", MinWindow, nopConn{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	var locked, inTable bool
	if _, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h"}, func(lease.Lease) func() {
		return func() {
			locked = !s.mu.TryLock()
			if !locked {
				s.mu.Unlock()
			}
			inTable = s.leases["a"] != nil
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !locked || !inTable {
		t.Fatalf("answer queued with the lock held %v, the lease in the table %v; want both", locked, inTable)
	}
}
