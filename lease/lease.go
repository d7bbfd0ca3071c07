package lease

import (
	"time"
)

// Lease is a lease as seen at one instant of the backend's clock
// (docs/contract.md §1): the stored record, whose fields are declared once
// in Record, and the time of the view. Its fields are promoted:
// l.Holder, l.FencingToken, l.ExpireTime.
type Lease struct {
	Record
	// ServerTime is the backend's time at which this view was decided.
	ServerTime time.Time
	// Session reports that the holding is (or, once ended, was) held
	// through a session (docs/contract.md §14); SessionWindow, promoted
	// from the record, is then the session's window.
	Session bool
}

// Held reports whether the holding was live at ServerTime.
func (l Lease) Held() bool { return l.ServerTime.Before(l.ExpireTime) }

// Released reports whether the holding was ended by a release rather than
// by running out: a release sets ExpireTime before RenewTime + TTL, while
// acquire and renew set it to exactly that.
func (l Lease) Released() bool { return l.ExpireTime.Before(l.RenewTime.Add(l.TTL)) }

// Revoked reports whether an operator ended the holding (Revoke).
func (l Lease) Revoked() bool { return l.RevokeReason != "" }

// Remaining is the time from ServerTime to ExpireTime, never negative.
func (l Lease) Remaining() time.Duration {
	return max(l.ExpireTime.Sub(l.ServerTime), 0)
}

// ViewAt returns the Lease that the stored record r shows at serverTime.
func ViewAt(r *Record, serverTime time.Time) Lease { return view(r, serverTime) }

// existing returns r, or nil when there is no record or r is a tombstone:
// a deleted lease is not found, except by acquire, which continues its
// fencing token.
func existing(r *Record) *Record {
	if r == nil || !r.DeleteTime.IsZero() {
		return nil
	}
	return r
}

// view builds the Lease seen at serverTime from a stored record.
func view(r *Record, serverTime time.Time) Lease {
	return Lease{Record: *r, ServerTime: serverTime, Session: r.SessionKey != ""}
}
