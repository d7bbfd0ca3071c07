package client

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Test with errors.Is; every error the Client returns for
// an answer of the service is an *Error (or a *HeldError for lease_held)
// that matches one of these.
var (
	// ErrHeld: an acquire found the lease held by another holder. The error
	// is a *HeldError carrying the current lease.
	ErrHeld = errors.New("leasesvc: lease held by another holder")
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
	// policy does not allow the call (401, 403).
	ErrDenied = errors.New("leasesvc: permission denied")
	// ErrInternal: any other failure of the service (500, an answer the
	// client cannot read).
	ErrInternal = errors.New("leasesvc: internal error")
)

// FieldError names one bad field of a request (invalid_argument).
type FieldError struct {
	// Field is the request field, such as "ttlMs".
	Field string `json:"field"`
	// Detail says what is wrong with it.
	Detail string `json:"detail"`
}

// Error is a refusal by the service: an RFC 9457 problem (SPEC §4), or a
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
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(strings.TrimPrefix(e.kind.Error(), "leasesvc: "))
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

// Is makes errors.Is(err, ErrX) true for the error's sentinel.
func (e *Error) Is(target error) bool { return target == e.kind }

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

// kindOf maps a problem code (or, without one, an HTTP status) to its
// sentinel: the one place where the wire's codes become errors.
func kindOf(status int, code string) error {
	switch code {
	case "lease_held":
		return ErrHeld
	case "lease_lost":
		return ErrLost
	case "not_found":
		return ErrNotFound
	case "invalid_argument", "payload_too_large", "unsupported_media_type", "method_not_allowed":
		return ErrInvalid
	case "unavailable", "deadline_exceeded", "resource_exhausted":
		return ErrUnavailable
	case "unauthenticated", "permission_denied":
		return ErrDenied
	case "internal":
		return ErrInternal
	}
	switch {
	case status == 404:
		return ErrNotFound
	case status == 401 || status == 403:
		return ErrDenied
	case transientStatus(status):
		return ErrUnavailable
	case status >= 400 && status < 500:
		return ErrInvalid
	}
	return ErrInternal
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
