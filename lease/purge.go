package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasesvc/leasesvc/backend"
)

// ErrNoRemove is Purge on a backend that cannot remove a row for good
// (backend.Remover).
var ErrNoRemove = errors.New("lease: the backend cannot remove rows")

// Purge removes for good the record of a session (a name under
// SessionRecordPrefix) once it has ended at least endedFor ago by the
// backend's clock: released at close or expiry, or run out. Its name is
// never used again (a session key is random), so no tombstone is kept,
// and an absent record refuses a resume as an ended one does
// (docs/contract.md §14, Nothing left behind). The check is made again in
// the backend's transaction: a record renewed since it was read stays.
// It reports whether the row was removed.
func (m *Manager) Purge(ctx context.Context, name string, endedFor time.Duration) (bool, error) {
	if !strings.HasPrefix(name, SessionRecordPrefix) {
		return false, fmt.Errorf("lease: Purge of %q: only session records are purged", name)
	}
	rm, ok := m.store.(backend.Remover)
	if !ok {
		return false, ErrNoRemove
	}
	removed, err := rm.Remove(ctx, name, func(s backend.Snapshot) bool {
		if s.Row == nil {
			return false
		}
		rec, err := DecodeRow(*s.Row)
		if err != nil {
			return false
		}
		return !s.ServerTime.Before(rec.ExpireTime.Add(endedFor))
	})
	if err != nil {
		return false, fmt.Errorf("lease: purging %q: %w", name, err)
	}
	return removed, nil
}
