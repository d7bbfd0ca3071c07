package client

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Test with errors.Is; every error the Client returns for
// an answer of the service is an *Error (or a *HeldError for lease_held, a
// *ReservedError for lease_reserved) that matches one of these.
var (
	// ErrHeld: an acquire found the lease held by another holder. The error
	// is a *HeldError carrying the current lease.
	ErrHeld = errors.New("leasesvc: lease held by another holder")
	// ErrReserved: an acquire found the lease free but reserved for
	// another holder (docs/contract.md §8): the best waiting candidate after
	// a holding ended, or the successor a transfer named. The error is a
	// *ReservedError. A reservation lasts seconds: waiting acquires keep
	// waiting through it.
	ErrReserved = errors.New("leasesvc: lease reserved for another holder")
	// ErrLost: a renew or release by someone who is not the current live
	// holding. Stop acting as leader now.
	ErrLost = errors.New("leasesvc: lease lost")
	// ErrNotFound: the lease never existed (Get), or the route is unknown.
	ErrNotFound = errors.New("leasesvc: not found")
	// ErrInvalid: the service refused the request's arguments; the *Error
	// lists each bad field. Retrying the same request cannot succeed.
	ErrInvalid = errors.New("leasesvc: invalid argument")
	// ErrUnavailable: the service could not be reached or could not answer
	// (connection errors, timeouts, 502, 503, 504, 429), and retries did not
	// help before the context or the attempts ran out.
	ErrUnavailable = errors.New("leasesvc: unavailable")
	// ErrDenied: the service refused the caller's credentials or the
	// policy does not allow the call (401, 403). Every error that matches
	// ErrUnauthenticated or ErrPermissionDenied matches ErrDenied too.
	ErrDenied = errors.New("leasesvc: access denied")
	// ErrInternal: any other failure of the service (500, an answer the
	// client cannot read).
	ErrInternal = errors.New("leasesvc: internal error")

	// ErrUnauthenticated: the service wants credentials and got none, or
	// refused the ones sent (401 unauthenticated): check Config.TokenSource.
	// Also matches ErrDenied. Not retried.
	ErrUnauthenticated = errors.New("leasesvc: unauthenticated")
	// ErrPermissionDenied: the service knows the caller, but its policy
	// does not grant the caller this verb on this lease (403
	// permission_denied; Revoke needs the admin verb). Also matches
	// ErrDenied. Not retried.
	ErrPermissionDenied = errors.New("leasesvc: permission denied")
	// ErrSessionHeld: a plain renew, release or transfer (or an acquire by
	// its holder) of a live holding held through a session (409
	// session_held, docs/contract.md §3, §14): only its session acts on it.
	// Also matches ErrInvalid: retrying the same request cannot succeed.
	ErrSessionHeld = errors.New("leasesvc: held through a session")
	// ErrRateLimited: the service refused the call under the caller's rate
	// limit (429 resource_exhausted), and the retries, each sent no
	// earlier than the answer's Retry-After, did not get through before the
	// context or the attempts ran out. Also matches ErrUnavailable.
	ErrRateLimited = errors.New("leasesvc: rate limited")
	// ErrCredentials: Config.TokenSource gave no token (it failed, gave an
	// empty one, or did not answer within RequestTimeout), so the request
	// was not sent. The error wraps the token source's own error. The
	// Client does not retry it; an Elector does, at its own pace.
	ErrCredentials = errors.New("leasesvc: no credentials")
)

// FieldError names one bad field of a request (invalid_argument).
type FieldError struct {
	// Field is the request field, such as "ttlMs".
	Field string `json:"field"`
	// Detail says what is wrong with it.
	Detail string `json:"detail"`
}

// Error is a refusal by the service: an RFC 9457 problem (docs/contract.md §4), or a
// failed exchange with it. errors.Is matches it to the sentinel of its
// code.
type Error struct {
	// Status is the HTTP status; 0 when no answer arrived.
	Status int
	// Code is the problem's stable code, such as "lease_lost"; empty when
	// the answer was not a problem document.
	Code string
	// Detail is the problem's human-readable detail.
	Detail string
	// Fields lists the bad fields of an invalid_argument problem.
	Fields []FieldError
	// RetryAfter is the Retry-After header, 0 when absent.
	RetryAfter time.Duration
	// Err is the transport error when no answer arrived.
	Err error

	kind error // the sentinel
	sub  error // a finer sentinel within kind, or nil
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	class := e.kind
	if e.sub != nil {
		class = e.sub
	}
	b.WriteString(strings.TrimPrefix(class.Error(), "leasesvc: "))
	if e.Status != 0 {
		fmt.Fprintf(&b, " (%d", e.Status)
		if e.Code != "" {
			b.WriteString(" " + e.Code)
		}
		b.WriteString(")")
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	for _, f := range e.Fields {
		fmt.Fprintf(&b, "; %s: %s", f.Field, f.Detail)
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

// Is makes errors.Is(err, ErrX) true for the error's sentinels: its class
// (such as ErrDenied) and, for 401, 403 and 429, the finer one
// (ErrUnauthenticated, ErrPermissionDenied, ErrRateLimited).
func (e *Error) Is(target error) bool { return target == e.kind || (e.sub != nil && target == e.sub) }

// Unwrap returns the transport error, if any.
func (e *Error) Unwrap() error { return e.Err }

// HeldError is the refusal of an acquire because another holder holds the
// lease (lease_held). errors.Is(err, ErrHeld) is true for it, and
// errors.As gives the current lease: who leads, with which token.
type HeldError struct {
	// Lease is the current lease, held by another holder.
	Lease Lease
	// RetryAfter is the Retry-After header: the holding's remaining time,
	// rounded up to whole seconds.
	RetryAfter time.Duration
}

// Error implements error.
func (e *HeldError) Error() string {
	return fmt.Sprintf("leasesvc: lease %q held by %q (fencing token %d)", e.Lease.Name, e.Lease.Holder, e.Lease.FencingToken)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// ReservedError is the refusal of an acquire because the free lease is
// reserved for another holder (lease_reserved, docs/contract.md §8).
// errors.Is(err, ErrReserved) is true for it, and errors.As gives whom it
// is reserved for and until when.
type ReservedError struct {
	// Lease is the lease as the service saw it when it refused.
	Lease Lease
	// ReservedFor is the holder the lease is reserved for.
	ReservedFor string
	// ReservedUntil is the server time at which the reservation lapses, at
	// the latest.
	ReservedUntil time.Time
	// RetryAfter is the Retry-After header: the time until the reservation
	// lapses, rounded up to whole seconds (≥ 1s).
	RetryAfter time.Duration
}

// Error implements error.
func (e *ReservedError) Error() string {
	return fmt.Sprintf("leasesvc: lease %q reserved for %q until %s", e.Lease.Name, e.ReservedFor,
		e.ReservedUntil.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
}

// Is makes errors.Is(err, ErrReserved) true.
func (e *ReservedError) Is(target error) bool { return target == ErrReserved }

// kindOf maps a problem code (or, without one, an HTTP status) to its
// sentinel and, within it, a finer one (or nil): the one place where the
// wire's codes become errors.
func kindOf(status int, code string) (kind, sub error) {
	switch code {
	case "lease_held":
		return ErrHeld, nil
	case "lease_reserved":
		return ErrReserved, nil
	case "lease_lost":
		return ErrLost, nil
	case "session_held":
		return ErrInvalid, ErrSessionHeld
	case "not_found":
		return ErrNotFound, nil
	case "invalid_argument", "payload_too_large", "unsupported_media_type", "method_not_allowed":
		return ErrInvalid, nil
	case "unavailable", "deadline_exceeded":
		return ErrUnavailable, nil
	case "resource_exhausted":
		return ErrUnavailable, ErrRateLimited
	case "unauthenticated":
		return ErrDenied, ErrUnauthenticated
	case "permission_denied":
		return ErrDenied, ErrPermissionDenied
	case "internal":
		return ErrInternal, nil
	}
	switch {
	case status == 404:
		return ErrNotFound, nil
	case status == 401:
		return ErrDenied, ErrUnauthenticated
	case status == 403:
		return ErrDenied, ErrPermissionDenied
	case status == 429:
		return ErrUnavailable, ErrRateLimited
	case transientStatus(status):
		return ErrUnavailable, nil
	case status >= 400 && status < 500:
		return ErrInvalid, nil
	}
	return ErrInternal, nil
}

// transientStatus reports whether an answer with this status may succeed
// when the same request is sent again.
func transientStatus(status int) bool {
	switch status {
	case 429, 502, 503, 504:
		return true
	}
	return false
}
