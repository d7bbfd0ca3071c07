// Package backend defines the small driver interface that every lease store
// implements: a compare-and-set store of rows plus a source of server time.
//
// The lease rules of docs/contract.md §3 (expiry, fencing, idempotent acquire, release)
// live once, in package lease, and so does the lease's type (lease.Record)
// and its codec: a backend only stores the Rows it is given and supplies
// the clock that decides. A backend never calls time.Now to decide anything,
// except the memory backend, whose process clock is the server clock.
package backend

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors returned by a Store. A backend wraps its native error so
// both stay reachable: fmt.Errorf("%w: %w", backend.ErrUnavailable, err).
// Context errors (context.Canceled, context.DeadlineExceeded) are returned
// as they are, never wrapped in one of these.
var (
	// ErrConflict reports that a row changed between the read a decision
	// was made on and the write of that decision. Loop retries conflicts; it
	// surfaces only when Loop gives up (ctx still live).
	ErrConflict = errors.New("backend: conflict")
	// ErrUnavailable reports that the backend cannot be reached or is
	// overloaded; the operation may be retried later.
	ErrUnavailable = errors.New("backend: unavailable")
)

// Snapshot is a row as read at one instant of the backend's clock.
type Snapshot struct {
	// Row is the stored row, or nil when none exists.
	Row *Row
	// ServerTime is the backend's time of the read: the time that decides.
	ServerTime time.Time
}

// Decide computes the row to store from a snapshot. It returns the new
// row, or nil to leave the stored row unchanged, or an error to abort
// without writing. A Decide function must be pure: it may be called more
// than once (after a conflict, or once on a cheap read and again inside a
// transaction) and only its last answer counts.
type Decide func(cur Snapshot) (*Row, error)

// Store is the driver interface of a lease backend: one attempt at a time.
// The retries, the per-name gate, the read-first path for refusals and the
// settling of errors at ctx's deadline live once, in Loop, for every
// driver. All methods are safe for concurrent use by many goroutines and
// many processes.
type Store interface {
	// Get returns a snapshot of the row under name, read at the backend's
	// current time. A missing row is a snapshot with a nil Row and a
	// valid ServerTime, not an error.
	Get(ctx context.Context, name string) (Snapshot, error)

	// Try makes one attempt at an update: it reads the row under name at
	// the backend's time, calls decide with that snapshot, and stores what
	// decide returns only if the row is still the one decide saw. It
	// returns the snapshot that decide's answer produced (the written row
	// and the server time of the decision, or the unchanged row when
	// decide returned nil). An error from decide is returned unchanged (the
	// same value, not wrapped), with nothing written. A write that lost a
	// race is an error wrapping ErrConflict (see Conflict): Loop retries it.
	// A backend that cannot be reached answers ErrUnavailable; a context
	// error is returned bare.
	Try(ctx context.Context, name string, decide Decide) (Snapshot, error)

	// List returns up to limit rows whose names start with prefix and
	// sort after the name "after" (all names when after is ""), in
	// ascending byte order of the name, with the server time of the read.
	List(ctx context.Context, prefix, after string, limit int) ([]Row, time.Time, error)

	// Ping reports whether the backend answers; /readyz calls it.
	Ping(ctx context.Context) error
}

// Remover is implemented by stores that can remove a row for good (no
// tombstone): the service removes the records of ended sessions, whose
// names are never used again (docs/contract.md §14 Nothing left behind).
type Remover interface {
	// Remove deletes the row under name if, read at the backend's time
	// inside the same transaction (compare-and-delete), ok(snapshot)
	// reports true; it reports whether it deleted a row. A missing row is
	// (false, nil). A write that lost a race is an error wrapping
	// ErrConflict, like Try's; ErrUnavailable and context errors as Try.
	//
	// ok is called only with a snapshot that has a row, never for a
	// missing one. Like a Decide it must be pure: it may be called more
	// than once (a backend may run its transaction again) and only its
	// last answer counts. Remove is one attempt: no Loop retries it, so a
	// caller retries a conflict itself.
	Remove(ctx context.Context, name string, ok func(Snapshot) bool) (bool, error)
}

// Cursor is a position in expire-time order: rows sort by ExpireTime,
// then by Name.
type Cursor struct {
	// ExpireTime is the expire time of the last row seen.
	ExpireTime time.Time
	// Name is the name of the last row seen.
	Name string
}

// ExpiryScanner is implemented by stores that can find rows by expire
// time, for the sweeper that announces expired holdings (docs/contract.md §5). Its cost
// is proportional to the rows whose expire time falls in the scanned
// window, not to the number of leases, given an index on the expire time.
type ExpiryScanner interface {
	// ScanExpiry returns up to limit rows that sort after the cursor
	// and whose ExpireTime is at or before until, in (ExpireTime, Name)
	// order. Released holdings are included (their ExpireTime is the
	// release time); the caller tells them apart.
	ScanExpiry(ctx context.Context, after Cursor, until time.Time, limit int) ([]Row, error)
}

// MaxNotification is the largest payload, in bytes, that every Notifier
// carries (PostgreSQL refuses 8,000 bytes or more).
const MaxNotification = 7000

// EndedNotification begins a notification that a holding of the lease
// named by the rest ended.
const EndedNotification = "ended "

// Notifier is implemented by stores that carry messages between the
// instances sharing them, without a message bus (PostgreSQL's
// LISTEN/NOTIFY). When no Pub/Sub topic is set the service sends each change
// of holding through it, so that waiting acquires and watch streams on
// every instance see changes made on any other.
//
// A Notifier may also send, at the commit of a write that ends a holding,
// EndedNotification followed by the lease name, so that waiters elsewhere
// wake before the writer has even answered.
type Notifier interface {
	// Notify sends payload, at most MaxNotification bytes, to the Listen of
	// every instance, this one included.
	Notify(ctx context.Context, payload string) error
	// Listen calls got with each payload sent through any instance, until
	// ctx is done; it then returns ctx.Err(). It survives losing the
	// database and reconnects (what is sent meanwhile is lost).
	Listen(ctx context.Context, got func(payload string)) error
}
