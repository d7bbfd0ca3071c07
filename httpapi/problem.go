package httpapi

import (
	"cmp"
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
)

// The stable problem codes of docs/contract.md §4.
const (
	codeLeaseHeld            = "lease_held"
	codeLeaseLost            = "lease_lost"
	codeLeaseReserved        = "lease_reserved"
	codeSessionHeld          = "session_held"
	codeNotFound             = "not_found"
	codeInvalidArgument      = "invalid_argument"
	codePayloadTooLarge      = "payload_too_large"
	codeUnsupportedMediaType = "unsupported_media_type"
	codeMethodNotAllowed     = "method_not_allowed"
	codeUnavailable          = "unavailable"
	codeDeadlineExceeded     = "deadline_exceeded"
	codeInternal             = "internal"
	codeRequestTimeout       = "request_timeout"
)

// problem is an RFC 9457 problem detail with the code member of docs/contract.md §4.
type problem struct {
	status int
	code   string
	// title, if set, replaces the status text as the problem's title.
	title      string
	detail     string
	violations []lease.FieldViolation
	lease      *lease.Lease
	retryAfter int // seconds; 0 sends no Retry-After
	// reservedFor and reservedUntil are set on lease_reserved.
	reservedFor, reservedUntil string
	// epoch is the session's epoch, on session_conflict.
	epoch int64
	// limit names the cap a 429 is at when it is one of sessions
	// ("sessions"), so that a client tells it from its rate limit.
	limit string
}

// problemJSON is the wire form of a problem.
type problemJSON struct {
	Type     string           `json:"type"`
	Title    string           `json:"title"`
	Status   int              `json:"status"`
	Code     string           `json:"code"`
	Detail   string           `json:"detail,omitempty"`
	Instance string           `json:"instance,omitempty"`
	Errors   []fieldErrorJSON `json:"errors,omitempty"`
	Lease    *wire.Lease      `json:"lease,omitempty"`
	// ReservedFor and ReservedUntil are members of lease_reserved.
	ReservedFor   string `json:"reservedFor,omitempty"`
	ReservedUntil string `json:"reservedUntil,omitempty"`
	// Epoch is the session's epoch, a member of session_conflict.
	Epoch int64 `json:"epoch,omitempty"`
	// Limit is "sessions" on a 429 at a cap of sessions
	// (LEASESVC_MAX_SESSIONS, LEASESVC_MAX_SESSIONS_PER_CALLER).
	Limit string `json:"limit,omitempty"`
}

// fieldErrorJSON names one bad request field.
type fieldErrorJSON struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// ProblemTypeBase prefixes the problem code to make the RFC 9457 type URI.
const ProblemTypeBase = "urn:leasesvc:problem:"

func writeProblem(w http.ResponseWriter, r *http.Request, p problem) {
	body := problemJSON{
		Type:     ProblemTypeBase + p.code,
		Title:    cmp.Or(p.title, http.StatusText(p.status)),
		Status:   p.status,
		Code:     p.code,
		Detail:   p.detail,
		Instance: clip(r.URL.Path, maxLoggedPath),

		ReservedFor:   p.reservedFor,
		ReservedUntil: p.reservedUntil,
		Limit:         p.limit,
	}
	for _, v := range p.violations {
		body.Errors = append(body.Errors, fieldErrorJSON{Field: v.Field, Detail: v.Description})
	}
	if p.lease != nil {
		lj := wire.FromLease(*p.lease)
		body.Lease = &lj
	}
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	writeJSON(w, p.status, "application/problem+json", body)
}

// writeJSON writes v as the response. Encoding our own types cannot fail,
// and a failed write means the client has gone; neither has anyone to tell.
func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	b, err := wire.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"type":"` + ProblemTypeBase + codeInternal + `","title":"Internal Server Error","status":500,"code":"internal"}`)
		contentType = "application/problem+json"
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if _, err := w.Write(b); err == nil {
		_, _ = w.Write([]byte{'\n'})
	}
}

// errorProblem maps an error of the lease.Manager to its problem: the one
// place where sentinels become statuses and codes.
func (a *api) errorProblem(r *http.Request, err error) problem {
	var held *lease.HeldError
	var reserved *lease.ReservedError
	var invalid *lease.InvalidError
	switch {
	case errors.As(err, &reserved):
		l := reserved.Lease
		return problem{status: http.StatusConflict, code: codeLeaseReserved, lease: &l,
			detail:      "the lease is reserved for " + strconv.Quote(reserved.ReservedFor) + " (docs/contract.md §8)",
			reservedFor: reserved.ReservedFor, reservedUntil: wire.FormatTime(reserved.Until),
			retryAfter: max(1, int(math.Ceil(reserved.Until.Sub(l.ServerTime).Seconds())))}
	case errors.As(err, &held):
		l := held.Lease
		return problem{status: http.StatusConflict, code: codeLeaseHeld, lease: &l,
			detail:     "the lease is held by another holder",
			retryAfter: int(math.Ceil(l.Remaining().Seconds()))}
	case errors.Is(err, lease.ErrSessionHeld):
		return problem{status: http.StatusConflict, code: codeSessionHeld, title: "held through a session",
			detail: "the holding is held through a session (docs/contract.md §14): only its session renews, releases or transfers it"}
	case errors.Is(err, lease.ErrLost):
		return problem{status: http.StatusConflict, code: codeLeaseLost,
			detail: "no live holding with this holder and fencing token: stop acting as leader"}
	case errors.Is(err, lease.ErrNotFound):
		return problem{status: http.StatusNotFound, code: codeNotFound, detail: "no such lease"}
	case errors.As(err, &invalid):
		return problem{status: http.StatusBadRequest, code: codeInvalidArgument, detail: "the request has invalid fields", violations: invalid.Violations}
	case errors.Is(err, lease.ErrUnavailable), errors.Is(err, lease.ErrConflict):
		// ErrConflict: the backend gave up after its retries on contention;
		// the request changed nothing and may be retried.
		a.log.WarnContext(r.Context(), "backend unavailable", "path", clip(r.URL.Path, maxLoggedPath), "err", err)
		return problem{status: http.StatusServiceUnavailable, code: codeUnavailable, detail: "the backend is unavailable; retry later", retryAfter: 1}
	case errors.Is(err, context.DeadlineExceeded):
		a.log.WarnContext(r.Context(), "backend deadline exceeded", "path", clip(r.URL.Path, maxLoggedPath), "err", err)
		return problem{status: http.StatusGatewayTimeout, code: codeDeadlineExceeded, detail: "the backend did not answer in time"}
	case errors.Is(context.Cause(r.Context()), errShuttingDown), errors.Is(err, errShuttingDown):
		return shuttingDown()
	case errors.Is(err, context.Canceled):
		return problem{status: http.StatusServiceUnavailable, code: codeUnavailable, detail: "the request was cancelled", retryAfter: 1}
	}
	a.log.ErrorContext(r.Context(), "request failed", "path", clip(r.URL.Path, maxLoggedPath), "err", err)
	return problem{status: http.StatusInternalServerError, code: codeInternal, detail: "internal error"}
}
