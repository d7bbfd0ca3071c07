package lease

import (
	"errors"
	"strings"
	"time"
)

// ErrSessionHeld reports a plain renew, or a plain repeat acquire by its
// holder, of a live holding held through a session (docs/contract.md
// §14): only the session renews it. A plain release by its holder with its
// token still ends it.
var ErrSessionHeld = errors.New("lease: held through a session")

// ReasonSessionExpired is the Reason of the released event of a holding
// that ExpireSession ended because its session died (docs/contract.md §14).
const ReasonSessionExpired = "session_expired"

// SessionRecordPrefix begins the name of every session's own record, a
// hidden internal lease (docs/contract.md §14). Acquiring a name under it
// is refused, except as that session's record (SessionRecordName).
const SessionRecordPrefix = "leasesvc.session."

// SessionKeyLen is the length of a session key: the hex SHA-256 of the
// session id.
const SessionKeyLen = 64

// SessionRecordName returns the name of the record of the session whose
// key is key: SessionRecordPrefix and the key's first 32 hex characters.
func SessionRecordName(key string) string {
	return SessionRecordPrefix + key[:min(len(key), 32)]
}

// SessionRef names the session a request acts for (docs/contract.md §14).
type SessionRef struct {
	// Key is the hex SHA-256 of the session id (SessionKeyLen lower-case
	// hex characters); never the id.
	Key string
	// Epoch is the ownership epoch, ≥ 1: the instance that owns the
	// session writes with it, and a record that moved on to another epoch
	// refuses it (ErrLost).
	Epoch int64
	// Window is the session's heartbeat window, a whole number of
	// milliseconds (shown as sessionWindowMs). It is written by an acquire
	// and a takeover (> 0 required there) and by a renew when not 0.
	Window time.Duration
}

// checkSession adds the violations of ref; needWindow requires a window.
func checkSession(v *violations, ref *SessionRef, needWindow bool) {
	if len(ref.Key) != SessionKeyLen || strings.Trim(ref.Key, "0123456789abcdef") != "" {
		v.add("session.key", "must be %d lower-case hex characters", SessionKeyLen)
	}
	if ref.Epoch < 1 || ref.Epoch > MaxToken {
		v.add("session.epoch", "must be an integer between 1 and %d", int64(MaxToken))
	}
	if ref.Window < 0 || ref.Window%time.Millisecond != 0 || needWindow && ref.Window == 0 {
		v.add("session.windowMs", "must be a whole number of milliseconds > 0")
	}
}

// checkSessionTTL adds a violation unless ttl, the TTL of a write through
// a session, is a whole number of milliseconds > 0: the session lease TTL
// is the service's own setting, so the Manager's MaxTTL does not bound it.
func checkSessionTTL(v *violations, ttl time.Duration) {
	if ttl <= 0 || ttl%time.Millisecond != 0 {
		v.add("ttlMs", "must be a whole number of milliseconds > 0")
	}
}

// checkReservedName refuses a name under SessionRecordPrefix, unless it is
// the record of the session ref acts for, and every name under
// KeyRecordPrefix.
func checkReservedName(v *violations, name string, ref *SessionRef) {
	if strings.HasPrefix(name, SessionRecordPrefix) && (ref == nil || name != SessionRecordName(ref.Key)) {
		v.add("name", "must not begin with %q: the name is reserved for the service", SessionRecordPrefix)
	}
	if strings.HasPrefix(name, KeyRecordPrefix) {
		v.add("name", "must not begin with %q: the name is reserved for the service", KeyRecordPrefix)
	}
}

// sessionHeld reports whether the record's holding is held through a
// session.
func sessionHeld(r *Record) bool { return r != nil && r.SessionKey != "" }

// sameSession reports whether the record is held through the session of
// ref at its epoch.
func sameSession(r *Record, ref *SessionRef) bool {
	return r != nil && r.SessionKey == ref.Key && r.SessionEpoch == ref.Epoch
}

// setSession marks next as held through the session of ref, keeping the
// stored window when ref has none.
func setSession(next *Record, ref *SessionRef) {
	next.SessionKey, next.SessionEpoch = ref.Key, ref.Epoch
	if ref.Window != 0 {
		next.SessionWindow = ref.Window
	}
}

// clearSession marks next as not held through a session.
func clearSession(next *Record) {
	next.SessionKey, next.SessionEpoch, next.SessionWindow = "", 0, 0
}
