package lease

import (
	"context"
	"errors"
	"time"
)

// ErrNotIdle reports a Delete with FreeFor refused because the lease has
// not been free that long (a retention sweep raced a new holding).
var ErrNotIdle = errors.New("lease: not free long enough")

// DeleteRequest removes a lease that is not held (docs/contract.md §15).
type DeleteRequest struct {
	// Name is the lease name.
	Name string
	// Operator is the authenticated principal deleting ("" without
	// authentication, or the service itself); the deleted event carries it.
	Operator string
	// Reason, if set, says why; the deleted event carries it (the sweeper's
	// retention sets it, an API delete does not).
	Reason string
	// FreeFor, if > 0, deletes only a lease whose holding ended at least
	// that long before the decision, and is ErrNotIdle otherwise: the
	// retention sweep (LEASESVC_RETAIN_FREE) checks what it scanned again
	// in the write.
	FreeFor time.Duration
}

// Delete removes the lease req.Name. A held lease is refused with a
// *HeldError and one reserved for a successor (docs/contract.md §8) with a
// *ReservedError; a lease that never existed or is already deleted is
// ErrNotFound. What remains is a tombstone: the name, its fencing token
// and transitions, and the time of the deletion. Get, List and the watch
// streams treat it as not found, but the next Acquire of the name gets the
// token after the deleted one, so a token is never handed out twice. The
// metadata, the checkpoint and the registered candidates go with the
// lease. Delete returns the lease as it was when deleted, and reports a
// deleted event.
func (m *Manager) Delete(ctx context.Context, req DeleteRequest) (Lease, error) {
	var v violations
	checkName(&v, req.Name)
	if req.FreeFor < 0 {
		v.add("freeFor", "must not be negative")
	}
	if err := v.err(); err != nil {
		return Lease{}, err
	}
	var before *Record
	snap, err := m.loop.Update(ctx, req.Name, func(s Snapshot) (*Record, error) {
		before = existing(s.Record)
		return decideDelete(s.Record, req.FreeFor, decisionTime(s))
	})
	if err != nil {
		return Lease{}, opError("delete", req.Name, err)
	}
	l := view(before, decisionTime(snap))
	m.changed(Event{Type: EventDeleted, Lease: l, Time: l.ServerTime, Operator: req.Operator, Reason: req.Reason})
	return l, nil
}

// tombstone is the record a deletion of cur at now leaves: the fencing
// token and transitions that a later acquire continues from, and the
// holding's times, so that the record keeps its place in expire-time
// order; nothing that names a holder or carries data.
func tombstone(cur *Record, now time.Time) *Record {
	return &Record{
		Name: cur.Name, FencingToken: cur.FencingToken, Transitions: cur.Transitions,
		TTL: cur.TTL, AcquireTime: cur.AcquireTime, RenewTime: cur.RenewTime, ExpireTime: cur.ExpireTime,
		DeleteTime: now,
	}
}

// Tombstone reports whether r is what a deletion left (docs/contract.md
// §15): a backend scan returns tombstones with the records, and the caller
// tells them apart.
func Tombstone(r *Record) bool { return r != nil && !r.DeleteTime.IsZero() }
