package lease

import (
	"encoding/json"
	"time"

	"github.com/leasesvc/leasesvc/backend"
)

// Lease is a lease as seen at one instant of the backend's clock (SPEC §1).
type Lease struct {
	// Name is the lease name.
	Name string
	// Holder is the current holder or, when not held, the last one.
	Holder string
	// FencingToken identifies the holding; it grows by one per new holding.
	FencingToken int64
	// TTL is the duration the holder asked for.
	TTL time.Duration
	// AcquireTime is the server time at which the holding began.
	AcquireTime time.Time
	// RenewTime is the server time of the last acquire or renew.
	RenewTime time.Time
	// ExpireTime is the server time at which the holding ends unless renewed.
	ExpireTime time.Time
	// ServerTime is the backend's time at which this view was decided.
	ServerTime time.Time
	// Transitions counts the holdings the lease has had.
	Transitions int64
	// Metadata is the JSON object the holder attached, or nil.
	Metadata json.RawMessage
	// Principal is the authenticated principal that began the holding; ""
	// without authentication.
	Principal string
	// RevokedBy is the operator who revoked the holding, if it was revoked
	// and authentication is on.
	RevokedBy string
	// RevokeReason is the operator's reason when the holding was revoked;
	// "" otherwise.
	RevokeReason string
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
func ViewAt(r *backend.Record, serverTime time.Time) Lease { return view(r, serverTime) }

// view builds the Lease seen at serverTime from a stored record.
func view(r *backend.Record, serverTime time.Time) Lease {
	return Lease{
		Name:         r.Name,
		Holder:       r.Holder,
		FencingToken: r.FencingToken,
		TTL:          r.TTL,
		AcquireTime:  r.AcquireTime,
		RenewTime:    r.RenewTime,
		ExpireTime:   r.ExpireTime,
		ServerTime:   serverTime,
		Transitions:  r.Transitions,
		Metadata:     json.RawMessage(r.Metadata),
		Principal:    r.Principal,
		RevokedBy:    r.RevokedBy,
		RevokeReason: r.RevokeReason,
	}
}
