package backendtest

import (
	"context"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// records writes and reads lease records through a driver as the service
// does: package lease's codec makes the backend.Rows the driver stores, and
// the suite checks that what the driver gives back decodes to what was
// written. The driver under test sees rows only.
type records struct {
	store backend.Store
	loop  *backend.Loop
}

// Update updates the record under name through the Loop (backend.Loop.Update).
func (r records) Update(ctx context.Context, name string, decide lease.Decide) (lease.Snapshot, error) {
	return lease.UpdateWith(ctx, r.loop.Update, name, decide)
}

// Try makes one attempt of the driver (backend.Store.Try).
func (r records) Try(ctx context.Context, name string, decide lease.Decide) (lease.Snapshot, error) {
	return lease.UpdateWith(ctx, r.store.Try, name, decide)
}

// Get reads the record under name (backend.Store.Get).
func (r records) Get(ctx context.Context, name string) (lease.Snapshot, error) {
	return lease.GetWith(ctx, r.store.Get, name)
}

// List lists records (backend.Store.List).
func (r records) List(ctx context.Context, prefix, after string, limit int) ([]lease.Record, time.Time, error) {
	rows, at, err := r.store.List(ctx, prefix, after, limit)
	if err != nil {
		return nil, time.Time{}, err
	}
	recs, err := lease.DecodeRows(rows)
	return recs, at, err
}
