package lease

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors of the lease rules. Test with errors.Is; a *HeldError
// carries the current lease and a *InvalidError the bad fields.
var (
	// ErrHeld reports an acquire refused because another holder holds the lease.
	ErrHeld = errors.New("lease: held by another holder")
	// ErrLost reports a renew or release by anyone who is not the current
	// valid holding: the caller must stop acting as leader now.
	ErrLost = errors.New("lease: lost")
	// ErrReserved reports an acquire refused because the free lease is
	// reserved for another holder (docs/contract.md §8).
	ErrReserved = errors.New("lease: reserved for another holder")
	// ErrNotFound reports a lease that never existed.
	ErrNotFound = errors.New("lease: not found")
	// ErrInvalid reports a request that breaks the rules of docs/contract.md §1.
	ErrInvalid = errors.New("lease: invalid argument")
)

// HeldError is the refusal of an acquire: it carries the current lease, so a
// follower learns who leads and until when.
type HeldError struct {
	// Lease is the lease as seen when the acquire was refused.
	Lease Lease
}

// Error implements error.
func (e *HeldError) Error() string {
	return fmt.Sprintf("lease: %q held by %q until %s", e.Lease.Name, e.Lease.Holder, e.Lease.ExpireTime.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// ReservedError is the refusal of an acquire while the free lease is
// reserved for another holder: the best registered candidate after a
// holding ended, or the successor a transfer named.
type ReservedError struct {
	// Lease is the lease as seen when the acquire was refused.
	Lease Lease
	// ReservedFor is the holder the lease is reserved for.
	ReservedFor string
	// Until is the server time at which the reservation lapses, at the
	// latest.
	Until time.Time
}

// Error implements error.
func (e *ReservedError) Error() string {
	return fmt.Sprintf("lease: %q reserved for %q until %s", e.Lease.Name, e.ReservedFor, e.Until.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
}

// Is makes errors.Is(err, ErrReserved) true.
func (e *ReservedError) Is(target error) bool { return target == ErrReserved }

// FieldViolation names one bad field of a request and why it is bad.
type FieldViolation struct {
	// Field is the request field, as named on the wire (for example "ttlMs").
	Field string
	// Description says what is wrong with it.
	Description string
}

// InvalidError lists every bad field of a request.
type InvalidError struct {
	// Violations has one entry per bad field, at least one.
	Violations []FieldViolation
}

// Error implements error.
func (e *InvalidError) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.Field + ": " + v.Description
	}
	return "lease: invalid argument: " + strings.Join(parts, "; ")
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// violations accumulates field violations.
type violations []FieldViolation

func (v *violations) add(field, format string, args ...any) {
	*v = append(*v, FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// err returns nil when v is empty and an *InvalidError otherwise.
func (v violations) err() error {
	if len(v) == 0 {
		return nil
	}
	return &InvalidError{Violations: v}
}
