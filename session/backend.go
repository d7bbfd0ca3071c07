package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// Ref names the session a backend write acts for: the stored key (hex
// sha256 of the session id, never the id), the ownership epoch and the
// window. Every write through a session is a compare-and-set on Key and
// Epoch.
type Ref struct {
	Key    string
	Epoch  int64
	Window time.Duration
}

// TakeOver asks the backend to move a session-held holding to a newer
// epoch (a resume), extending it by TTL.
type TakeOver struct {
	Name, Holder, Principal string
	FencingToken            int64
	TTL                     time.Duration
}

// Record is a lease as the backend stores it, with the session members the
// Registry reads.
type Record struct {
	Lease  lease.Lease
	Key    string        // the holding's session key, "" when not session-held
	Epoch  int64         // its ownership epoch
	Window time.Duration // its session's window
}

// Backend is what the Registry needs of the lease layer (lease.Manager
// through Manager). A write whose compare-and-set on the session fails
// returns lease.ErrLost.
type Backend interface {
	Acquire(ctx context.Context, ref Ref, req lease.AcquireRequest) (lease.Lease, error)
	Renew(ctx context.Context, ref Ref, req lease.RenewRequest) (lease.Lease, error)
	Release(ctx context.Context, ref Ref, req lease.ReleaseRequest) (lease.Lease, error)
	Transfer(ctx context.Context, ref Ref, req lease.TransferRequest) (lease.Lease, error)
	// Expire ends a holding because its session died (event reason
	// session_expired).
	Expire(ctx context.Context, ref Ref, req lease.ReleaseRequest) (lease.Lease, error)
	TakeOver(ctx context.Context, ref Ref, req TakeOver) (lease.Lease, error)
	// Get reads a lease; lease.ErrNotFound when it never existed.
	Get(ctx context.Context, name string) (Record, error)
}

// Errors of Open and Resume; httpapi maps each to its problem.
var (
	// ErrNotFound: no live session with this id for this caller
	// (404 session_not_found).
	ErrNotFound = errors.New("session: no such session")
	// ErrConflict: another resume of the session won the epoch
	// (409 session_conflict).
	ErrConflict = errors.New("session: another resume of the session won")
	// ErrClosed: the session ended (closed, expired or moved) while the
	// request was under way.
	ErrClosed = errors.New("session: the session has ended")
	// ErrShuttingDown: the instance is shutting down and opens nothing.
	ErrShuttingDown = errors.New("session: the instance is shutting down")
)

// ConflictError is a resume refused because the session is already at
// Epoch, the proposed epoch or above (409 session_conflict): a later
// resume of the agent owns it. errors.Is(err, ErrConflict) is true.
type ConflictError struct{ Epoch int64 }

func (e *ConflictError) Error() string {
	return fmt.Sprintf("session: the session is at epoch %d already: a later resume owns it", e.Epoch)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// LimitError is a refusal for a limit of docs/contract.md §14 (429
// resource_exhausted).
type LimitError struct {
	// What names the limit: "sessions of this caller", "sessions of this
	// instance" or "leases of this session".
	What string
	// Max is the limit.
	Max int
}

func (e *LimitError) Error() string { return "session: too many " + e.What }

// WindowError is a window out of range (400 invalid_argument).
type WindowError struct{ Window time.Duration }

func (e *WindowError) Error() string {
	return "session: windowMs must be between 200 and 60000"
}
