package sweeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// DefaultRecordRetention is how long after a session ended its record is
// removed (Config.RecordRetention): long past the window of any session
// (60 s at most), so that a resume that was under way as it ended finds
// the ended record, not an empty place; and short, so that an instance
// keeps no row per session it ever had (docs/contract.md §14).
const DefaultRecordRetention = time.Minute

// purgeRecords removes, with one scan of at most Batch records, the
// records of sessions that ended RecordRetention ago at now (released at
// close or expiry, or run out because their instance died), through
// lease.Manager.Purge, which checks again in its transaction. Like the
// retention of free leases it goes on from its own cursor and, once
// caught up, looks again every RetainEvery: a record is gone at most
// RecordRetention + RetainEvery + a sweep after its session ended.
func (s *Sweeper) purgeRecords(ctx context.Context, now time.Time) error {
	if s.cfg.RecordRetention < 0 || !s.purgedAt.IsZero() && time.Since(s.purgedAt) < RetainEvery {
		return nil
	}
	recs, err := lease.ScanExpiry(ctx, s.cfg.Scanner, s.purged, now.Add(-s.cfg.RecordRetention), s.cfg.Batch)
	if err != nil {
		return fmt.Errorf("session record scan after %v: %w", s.purged.ExpireTime, err)
	}
	for i := range recs {
		r := &recs[i]
		if strings.HasPrefix(r.Name, lease.SessionRecordPrefix) {
			removed, err := s.cfg.Manager.Purge(ctx, r.Name, s.cfg.RecordRetention)
			switch {
			case errors.Is(err, lease.ErrNoRemove):
				s.cfg.RecordRetention = -1 // this backend keeps them; say so once
				s.cfg.Logger.Warn("sweeper: the backend cannot remove rows: ended session records stay", "err", err)
				return nil
			case err != nil:
				return fmt.Errorf("session record purge of %q: %w", r.Name, err) // the next scan tries again
			case removed:
				s.cfg.Logger.Debug("sweeper: removed an ended session's record", "lease", r.Name)
			}
		}
		s.purged = backend.Cursor{ExpireTime: r.ExpireTime, Name: r.Name}
	}
	if len(recs) < s.cfg.Batch {
		s.purgedAt = time.Now() // caught up: look again in RetainEvery
	}
	return nil
}
