// Package audit writes the audit trail of leasesvc: one structured log line
// per change of holding (acquired, released, revoked, expired), per
// deletion of a lease (deleted, docs/contract.md §15), per
// request refused for authentication or authorization reasons, and per
// step of a session (opened, resumed, closed, expired, moved, refused;
// docs/contract.md §14), which names the session by the first 8 hex
// characters of its stored key, never by its id.
//
// Every line is an INFO record with the message "audit", the Cloud Logging
// label leasesvc_log=audit (under logging.googleapis.com/labels, which
// Cloud Logging lifts into the entry's labels) and one group "audit":
//
//	{"severity":"INFO","message":"audit",
//	 "logging.googleapis.com/labels":{"leasesvc_log":"audit"},
//	 "audit":{"action":"revoked","outcome":"ok","principal":"oncall@example.com",
//	          "lease":"team-a.scheduler","fencingToken":7,"holder":"agent-3",
//	          "holderPrincipal":"agent-3@example.com","reason":"stuck"}}
//
// so that a log sink can route exactly these lines with the filter
// labels.leasesvc_log="audit". A change's action is the event type
// (acquired, released, revoked, expired, deleted); a refusal's is the
// operation refused (acquire, renew, release, revoke, delete, get, list,
// watch; connect, the session upgrade, for a request from an origin or to
// a Host not served). A released event whose session died carries reason
// session_expired; a holding taken through a session carries session, the
// first 8 hex characters of its stored key, as a session's own record's
// name does. Tokens and
// credentials are never logged. cmd/leasesvc writes these lines whatever
// the log level.
package audit

import (
	"context"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/leasesvc/leasesvc/lease"
)

// MaxField is the most bytes of one string an audit line carries; a longer
// one is cut, marked with "…". With it every line stays far below Cloud
// Logging's 256 KB entry limit, whatever a caller sends.
const MaxField = 1024

// str is a string attribute cut to MaxField bytes and made valid UTF-8.
func str(key, v string) slog.Attr {
	v = strings.ToValidUTF8(v, "\ufffd")
	if len(v) > MaxField {
		cut := MaxField
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut--
		}
		v = v[:cut] + "…"
	}
	return slog.String(key, v)
}

// LabelsKey is the field Cloud Logging reads labels from.
const LabelsKey = "logging.googleapis.com/labels"

// OutcomeOK is the outcome of a change that took effect.
const OutcomeOK = "ok"

// Log writes audit lines. A nil *Log writes nothing.
type Log struct{ l *slog.Logger }

// New returns a Log writing through l.
func New(l *slog.Logger) *Log { return &Log{l: l} }

// labels marks a line as part of the audit trail.
var labels = slog.Group(LabelsKey, slog.String("leasesvc_log", "audit"))

// Change records a change of holding. principal is who caused it: the
// holding's principal for acquired and released, the operator for revoked
// and deleted ("" for the service's own retention deletes), "" (the
// service) for expired.
func (a *Log) Change(ctx context.Context, ev lease.Event) {
	if a == nil {
		return
	}
	l := ev.Lease
	attrs := []any{
		str("action", string(ev.Type)),
		str("outcome", OutcomeOK),
		str("lease", shortName(l.Name)),
		slog.Int64("fencingToken", l.FencingToken),
		str("holder", l.Holder),
		str("holderPrincipal", l.Principal),
		str("eventTime", ev.Time.UTC().Format("2006-01-02T15:04:05.999999Z07:00")),
	}
	switch ev.Type {
	case lease.EventRevoked:
		attrs = append(attrs, str("principal", ev.Operator), str("reason", ev.Reason))
	case lease.EventDeleted:
		attrs = append(attrs, str("principal", ev.Operator))
		if ev.Reason != "" {
			attrs = append(attrs, str("reason", ev.Reason))
		}
	case lease.EventExpired:
		attrs = append(attrs, str("principal", ""))
	case lease.EventReleased:
		// A holding its session's death ended says so: the service
		// released it, not its holder (docs/contract.md §14).
		attrs = append(attrs, str("principal", l.Principal))
		if ev.Reason != "" {
			attrs = append(attrs, str("reason", ev.Reason))
		}
	default:
		attrs = append(attrs, str("principal", l.Principal))
	}
	if l.SessionKey != "" {
		attrs = append(attrs, str("session", l.SessionKey[:min(len(l.SessionKey), ShortSession)]))
	}
	if ev.Type == lease.EventAcquired && ev.PreviousHolder != "" {
		attrs = append(attrs, str("previousHolder", ev.PreviousHolder), slog.Bool("previousExpired", ev.PreviousExpired))
	}
	a.l.InfoContext(ctx, "audit", labels, slog.Group("audit", attrs...))
}

// ShortSession is how many hex characters of a session's stored key name
// it in audit lines (docs/contract.md §14): a session record's lease name
// and a holding's session attribute carry that many, never more.
const ShortSession = 8

// shortName is a lease name as audit lines carry it: a session's own
// record (lease.SessionRecordPrefix and 32 hex characters of its key) is
// cut to ShortSession characters of the key.
func shortName(name string) string {
	if key, ok := strings.CutPrefix(name, lease.SessionRecordPrefix); ok && len(key) > ShortSession {
		return lease.SessionRecordPrefix + key[:ShortSession]
	}
	return name
}

// Refused records a request refused before it reached the lease: outcome is
// the problem code (unauthenticated, permission_denied), action the
// operation (acquire, renew, release, revoke, get, list, watch), principal
// the caller ("" when unauthenticated), name the lease or list prefix, and
// detail why, without credentials. It also records the 403s of a request
// from an origin or to a Host the service does not serve
// (origin_not_allowed, host_not_allowed; action connect for the session
// upgrade), before any authentication (principal "").
func (a *Log) Refused(ctx context.Context, action, outcome, principal, name, detail string) {
	if a == nil {
		return
	}
	a.l.InfoContext(ctx, "audit", labels, slog.Group("audit",
		str("action", action),
		str("outcome", outcome),
		str("principal", principal),
		str("lease", shortName(name)),
		str("detail", detail),
	))
}

// Session records a step of a session (docs/contract.md §14): action is
// session_open, session_resume, session_close, session_expire,
// session_moved or session_lapse (its record ran out), outcome "ok" or the refusal's problem code, principal the
// session's, session the first 8 hex characters of its stored key (never
// the session id, a bearer secret) and detail why.
func (a *Log) Session(ctx context.Context, action, outcome, principal, session, detail string) {
	if a == nil {
		return
	}
	a.l.InfoContext(ctx, "audit", labels, slog.Group("audit",
		str("action", action),
		str("outcome", outcome),
		str("principal", principal),
		str("session", session[:min(len(session), ShortSession)]),
		str("detail", detail),
	))
}

// Overload records an action of the overload manager (docs/contract.md
// §16): action is overload_level (the level changed; outcome the new
// level), overload_shed (something a caller held was ended; outcome its
// kind) or overload_refuse (new work refused; outcome unavailable),
// principal the caller ("" for a level change) and detail the memory in
// use and why.
func (a *Log) Overload(ctx context.Context, action, outcome, principal, detail string) {
	if a == nil {
		return
	}
	a.l.InfoContext(ctx, "audit", labels, slog.Group("audit",
		str("action", action),
		str("outcome", outcome),
		str("principal", principal),
		str("detail", detail),
	))
}
