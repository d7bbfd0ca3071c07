package lease

import (
	"encoding/json"
	"time"
)

// Record is the stored state of one lease: the fields of docs/contract.md §1 that are not
// derived from the time of a read: the lease's own type, which no driver
// sees. A driver stores it as EncodeRow splits it (codec.go): a
// backend.Row, a few columns of its own and one encoded value.
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
	// fields, like every field that is not a column of a backend.Row,
	// inside the one encoded value of EncodeRow (codec.go), so adding one
	// changes no schema.

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
	// acquire continues from them. This package decides what a tombstone
	// holds; a backend stores it like any other row.
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

// Snapshot is a record as read at one instant of the backend's clock: a
// Snapshot with its row decoded.
type Snapshot struct {
	// Record is the stored record, or nil when none exists.
	Record *Record
	// ServerTime is the backend's time of the read: the time that decides.
	ServerTime time.Time
}

// Decide computes the record to store from a snapshot: nil leaves the
// stored record unchanged, an error aborts without writing. It must be
// pure, as a backend.Decide is: it may be called more than once and only
// its last answer counts. It never changes the snapshot's record in place.
type Decide func(cur Snapshot) (*Record, error)
