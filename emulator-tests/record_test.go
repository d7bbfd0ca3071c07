package emulatortests

import (
	"testing"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// getRecord reads the row under name from s and decodes it as package
// lease does (lease.DecodeSnapshot).
func getRecord(t *testing.T, s backend.Store, name string) (lease.Snapshot, error) {
	t.Helper()
	snap, err := s.Get(t.Context(), name)
	if err != nil {
		return lease.Snapshot{}, err
	}
	return lease.DecodeSnapshot(snap)
}
