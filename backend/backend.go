// Package backend defines the small driver interface that every lease store
// implements: a compare-and-set store of lease records plus a source of
// server time.
//
// The lease rules of docs/contract.md §3 (expiry, fencing, idempotent acquire, release)
// live once, in package lease; a backend only stores records and supplies the
// clock that decides. A backend never calls time.Now to decide anything,
// except the memory backend, whose process clock is the server clock.
package backend

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Sentinel errors returned by a Store. A backend wraps its native error so
// both stay reachable: fmt.Errorf("%w: %w", backend.ErrUnavailable, err).
// Context errors (context.Canceled, context.DeadlineExceeded) are returned
// as they are, never wrapped in one of these.
var (
	// ErrConflict reports that a record changed between the read a decision
	// was made on and the write of that decision. Loop retries conflicts; it
	// surfaces only when Loop gives up (ctx still live).
	ErrConflict = errors.New("backend: conflict")
	// ErrUnavailable reports that the backend cannot be reached or is
	// overloaded; the operation may be retried later.
	ErrUnavailable = errors.New("backend: unavailable")
)

// Record is the stored state of one lease: the fields of docs/contract.md §1 that are not
// derived from the time of a read. A driver stores it as EncodeRow splits
// it (codec.go): a few columns of its own and one encoded value.
type Record struct {
	// Name is the lease name, the record's key.
	Name string
	// Holder is the current holder or, when the holding has ended, the last one.
	Holder string
	// FencingToken is the token of the current (or last) holding, ≥ 1.
	FencingToken int64
	// TTL is the duration the holder asked for.
	TTL time.Duration
	// AcquireTime is the server time at which the current holding began.
	AcquireTime time.Time
	// RenewTime is the server time of the last acquire or renew of the holding.
	RenewTime time.Time
	// ExpireTime is the server time at which the holding ends unless renewed.
	ExpireTime time.Time
	// Transitions counts how many times the lease passed to a new holding.
	Transitions int64
	// Metadata is a JSON object attached by the holder; nil means none.
	Metadata json.RawMessage
	// Principal is the authenticated principal that began the holding;
	// empty when authentication is off.
	Principal string
	// RevokedBy is the principal of the operator who revoked the holding
	// (empty when authentication is off or the holding was not revoked).
	RevokedBy string
	// RevokeReason is the operator's reason when the holding was ended by a
	// revocation; empty otherwise. A non-empty reason marks a revoked holding.
	RevokeReason string

	// The succession state of docs/contract.md §8. A driver stores these
	// fields, like every field that is not a column of a Row, inside the
	// one encoded value of EncodeRow (codec.go), so adding one changes no
	// schema.

	// Priority is the priority the current (or last) holding was acquired
	// with, 0 … 1000.
	Priority int
	// Checkpoint is the JSON object the last holding to write one left
	// (nil for none); it outlives the holding that wrote it.
	Checkpoint json.RawMessage
	// CheckpointToken is the fencing token of the holding that wrote
	// Checkpoint; 0 when there is none.
	CheckpointToken int64
	// Candidates are the waiting acquires registered for the lease, in no
	// particular order. A Decide never changes this slice in place: it
	// builds a new one.
	Candidates []Candidate
	// ReservedFor names the holder a transfer reserved the lease for, until
	// ReservedUntil; "" for none.
	ReservedFor string
	// ReservedPrincipal is the principal whose acquire as ReservedFor takes
	// the reserved lease ("" without authentication).
	ReservedPrincipal string
	// ReservedUntil is the server time at which a transfer's reservation
	// lapses.
	ReservedUntil time.Time
	// DeleteTime is the server time at which the lease was deleted
	// (docs/contract.md §15); not zero marks a tombstone: a record that
	// only keeps the name's fencing token and transitions, so that a later
	// acquire continues from them. Package lease decides what a tombstone
	// holds; a backend stores it like any record.
	DeleteTime time.Time

	// The session of docs/contract.md §14 that the current (or last)
	// holding is held through; all zero for a holding that is not. Stored
	// with the succession fields, in the encoded value of EncodeRow.

	// SessionKey is the hex SHA-256 of the session id (64 characters),
	// never the id itself; "" for a holding not held through a session.
	SessionKey string
	// SessionEpoch is the ownership epoch of the session instance that
	// last wrote the holding, ≥ 1 when SessionKey is set: renewals and
	// releases through the session compare-and-set on it.
	SessionEpoch int64
	// SessionWindow is the session's heartbeat window (shown as
	// sessionWindowMs).
	SessionWindow time.Duration
}

// Candidate is one registered waiting acquire of a lease (docs/contract.md §8).
type Candidate struct {
	// ID identifies the waiting request that registered it.
	ID string `json:"id"`
	// Holder is the holder the request would acquire as.
	Holder string `json:"holder"`
	// Principal is the authenticated caller ("" without authentication).
	Principal string `json:"principal,omitempty"`
	// Priority is the candidate's priority, 0 … 1000.
	Priority int `json:"priority"`
	// Preempt asks the current holder to step down when Priority is
	// strictly higher than the holding's.
	Preempt bool `json:"preempt,omitempty"`
	// Since is the server time at which the candidate began waiting.
	Since time.Time `json:"since"`
	// Until is the server time at which its wait runs out; a registration
	// left behind by a crashed instance ends by itself then.
	Until time.Time `json:"until"`
}

// Snapshot is a record as read at one instant of the backend's clock.
type Snapshot struct {
	// Record is the stored record, or nil when none exists.
	Record *Record
	// ServerTime is the backend's time of the read: the time that decides.
	ServerTime time.Time
}

// Decide computes the record to store from a snapshot. It returns the new
// record, or nil to leave the stored record unchanged, or an error to abort
// without writing. A Decide function must be pure: it may be called more
// than once (after a conflict, or once on a cheap read and again inside a
// transaction) and only its last answer counts.
type Decide func(cur Snapshot) (*Record, error)

// Store is the driver interface of a lease backend: one attempt at a time.
// The retries, the per-name gate, the read-first path for refusals and the
// settling of errors at ctx's deadline live once, in Loop, for every
// driver. All methods are safe for concurrent use by many goroutines and
// many processes.
type Store interface {
	// Get returns a snapshot of the record under name, read at the backend's
	// current time. A missing record is a snapshot with a nil Record and a
	// valid ServerTime, not an error.
	Get(ctx context.Context, name string) (Snapshot, error)

	// Try makes one attempt at an update: it reads the record under name at
	// the backend's time, calls decide with that snapshot, and stores what
	// decide returns only if the record is still the one decide saw. It
	// returns the snapshot that decide's answer produced (the written record
	// and the server time of the decision, or the unchanged record when
	// decide returned nil). An error from decide is returned unchanged (the
	// same value, not wrapped), with nothing written. A write that lost a
	// race is an error wrapping ErrConflict (see Conflict): Loop retries it.
	// A backend that cannot be reached answers ErrUnavailable; a context
	// error is returned bare.
	Try(ctx context.Context, name string, decide Decide) (Snapshot, error)

	// List returns up to limit records whose names start with prefix and
	// sort after the name "after" (all names when after is ""), in
	// ascending byte order of the name, with the server time of the read.
	List(ctx context.Context, prefix, after string, limit int) ([]Record, time.Time, error)

	// Ping reports whether the backend answers; /readyz calls it.
	Ping(ctx context.Context) error
}

// Cursor is a position in expire-time order: records sort by ExpireTime,
// then by Name.
type Cursor struct {
	// ExpireTime is the expire time of the last record seen.
	ExpireTime time.Time
	// Name is the name of the last record seen.
	Name string
}

// ExpiryScanner is implemented by stores that can find records by expire
// time, for the sweeper that announces expired holdings (docs/contract.md §5). Its cost
// is proportional to the records whose expire time falls in the scanned
// window, not to the number of leases, given an index on the expire time.
type ExpiryScanner interface {
	// ScanExpiry returns up to limit records that sort after the cursor
	// and whose ExpireTime is at or before until, in (ExpireTime, Name)
	// order. Released holdings are included (their ExpireTime is the
	// release time); the caller tells them apart.
	ScanExpiry(ctx context.Context, after Cursor, until time.Time, limit int) ([]Record, error)
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
