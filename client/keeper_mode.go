package client

import (
	"errors"
	"fmt"
	"time"
)

// The modes of a Keeper (KeeperMode.Mode, Keeper.Mode).
const (
	// ModeSession: the Keeper holds its leases through a session; the
	// session's heartbeats keep them.
	ModeSession = "session"
	// ModePlain: the Keeper holds its leases with plain renewals (acquire,
	// then renew every RenewInterval).
	ModePlain = "plain"
)

// PlainReason says why a Keeper holds with plain renewals (rule L1 of the
// SDKs' lifecycle, sdk/conformance/PROTOCOL.md). The codes are the same in
// every SDK.
type PlainReason string

// The reasons for plain renewals.
const (
	// PlainAsked: KeeperConfig.PlainRenewals asked for them.
	PlainAsked PlainReason = "asked"
	// PlainSessionsUnsupported: the service offers no sessions.
	PlainSessionsUnsupported PlainReason = "sessions_unsupported"
	// PlainSessionLimit: the service refused the session at its session
	// limit (429 on the upgrade). Remembered for the Keeper's life; a new
	// Keeper asks again.
	PlainSessionLimit PlainReason = "session_limit"
	// PlainWindow: KeeperConfig.CancelBefore does not fit the session's
	// window (FitCancelBefore).
	PlainWindow PlainReason = "window"
)

// KeeperMode is how a Keeper holds its leases, chosen once at NewKeeper
// and kept for the Keeper's life (Keeper.ModeInfo, KeeperConfig.OnMode).
type KeeperMode struct {
	// Mode is ModeSession or ModePlain.
	Mode string
	// Reason says why the mode is ModePlain; "" with ModeSession.
	Reason PlainReason
	// Cause is the refusal or check behind Reason (the session open's
	// error, FitCancelBefore's); nil with PlainAsked and ModeSession.
	Cause error
	// Span is how long a holding lasts unconfirmed: the session's window,
	// or the TTL of plain renewals.
	Span time.Duration

	desc string // String's, written by the Keeper's holder (describe)
}

// String says how the leases are held, for logs and agents: "through a
// session (window 1s)" or "with plain renewals (ttl 30s): the service
// offers no sessions".
func (m KeeperMode) String() string { return m.desc }

// why says, for a log line, why a mode is plain: "" with no reason.
func (r PlainReason) why(cause error) string {
	switch r {
	case PlainAsked:
		return ": plain renewals were asked for"
	case PlainSessionsUnsupported:
		return ": the service offers no sessions"
	case PlainSessionLimit:
		return ": the service's session limit is reached"
	case PlainWindow:
		return fmt.Sprintf(": the session window does not fit (%v)", cause)
	}
	return ""
}

// RetryOp names what a Keeper retries (KeeperRetry.Op).
type RetryOp string

// The operations a Keeper retries.
const (
	// RetryOpenSession: opening the Keeper's session failed (NewKeeper
	// retries until its ctx ends).
	RetryOpenSession RetryOp = "open_session"
	// RetryRenew: a renew the Keeper sent for a plain holding failed; the
	// holding lasts until its deadline.
	RetryRenew RetryOp = "renew"
)

// KeeperRetry is a failure a Keeper retries (KeeperConfig.OnRetry), so that
// tools need not read its log lines.
type KeeperRetry struct {
	// Op is what failed.
	Op RetryOp
	// Lease and Token name the holding of a RetryRenew; empty otherwise.
	Lease string
	Token int64
	// Attempt counts the failures in a row, from 1.
	Attempt int
	// Delay is how long the Keeper waits before it tries again.
	Delay time.Duration
	// Err is the failure.
	Err error
}

// ErrKeeperClosed is the error of Keeper.Hold after Keeper.Close, and of a
// holding that was still held when its Keeper closed.
var ErrKeeperClosed = errors.New("client: keeper closed")

// StopAt is the stop time of a term (rule L3): the holding's safe deadline
// less cancelBefore. Everything that stops work before a deadline (the
// Elector, leasectl run, leasectl mcp) uses it.
func StopAt(deadline time.Time, cancelBefore time.Duration) time.Time {
	return deadline.Add(-cancelBefore)
}

// FitCancelBefore reports whether cancelBefore fits span (a session window,
// or the TTL of plain renewals) with the drift margin margin (rule L3):
// it fits when cancelBefore < SafeSpan(span, margin) − span/2, so that a
// holding whose deadline moves every span/4 (a heartbeat) or span/3 (a
// renew) can be led between two confirmations. Otherwise the error wraps
// ErrInvalid and names CancelBefore, the limit and the span. A too large
// value is never capped; see DefaultCancelBeforeFor for the default.
func FitCancelBefore(span time.Duration, margin float64, cancelBefore time.Duration) error {
	if cancelBefore < 0 {
		return fmt.Errorf("%w: CancelBefore %v must not be negative", ErrInvalid, cancelBefore)
	}
	if limit := CancelBeforeLimit(span, margin); cancelBefore >= limit {
		return fmt.Errorf("%w: CancelBefore %v must be below %v (SafeSpan − span/2) for a span of %v",
			ErrInvalid, cancelBefore, limit, span)
	}
	return nil
}

// CancelBeforeLimit is the least CancelBefore that does not fit span (a
// session window or a TTL) at drift margin margin: SafeSpan(span, margin)
// − span/2, so that a term outlasts one missed confirmation. FitCancelBefore
// refuses it and anything above; tools that say the limit read it here.
func CancelBeforeLimit(span time.Duration, margin float64) time.Duration {
	return SafeSpan(span, margin) - span/2
}

// DefaultCancelBeforeFor is the CancelBefore used when none is given for
// span (a session window or a TTL): min(DefaultCancelBefore, span/10).
func DefaultCancelBeforeFor(span time.Duration) time.Duration {
	return min(DefaultCancelBefore, span/10)
}

// cancelBeforeFor is the CancelBefore for span: given, or the default
// when 0, and checked (FitCancelBefore).
func cancelBeforeFor(span time.Duration, margin float64, given time.Duration) (time.Duration, error) {
	cb := given
	if cb == 0 {
		cb = DefaultCancelBeforeFor(span)
	}
	if err := FitCancelBefore(span, margin, cb); err != nil {
		return 0, err
	}
	return cb, nil
}

// SafeSpan is how long after the send of a confirmation (an acquire or
// renew that succeeded, an acknowledged heartbeat) a holding may be acted
// on: span (a TTL or a session window) × (1 − margin). Every safe
// deadline of this package is a send time plus SafeSpan.
func SafeSpan(span time.Duration, margin float64) time.Duration {
	return time.Duration(float64(span) * (1 - margin))
}
