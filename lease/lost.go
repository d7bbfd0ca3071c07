package lease

import (
	"fmt"
	"time"
)

// Reasons a holding was lost, as a failed write through a session finds
// them (docs/contract.md §14 lost pushes).
const (
	// LostTaken: another holding of the lease began (or the record is
	// held otherwise than by the caller's holding).
	LostTaken = "taken"
	// LostExpired: the holding ran out, or its session expired.
	LostExpired = "expired"
	// LostReleased: the holding was released.
	LostReleased = "released"
	// LostRevoked: an operator revoked the holding.
	LostRevoked = "revoked"
	// LostDeleted: the lease was deleted (or never existed).
	LostDeleted = "deleted"
	// LostMoved: the holding is held through the caller's session at a
	// higher epoch: the session moved to another owner.
	LostMoved = "moved"
)

// LostError is ErrLost with what the stored record showed, so that a
// session can tell its agent why without reading the lease again
// (docs/contract.md §14: a lost push needs no backend read). errors.Is(err,
// ErrLost) is true.
type LostError struct {
	// Reason is one of the Lost* constants.
	Reason string
	// Epoch is the session epoch found, for LostMoved.
	Epoch int64
	// RevokedBy and RevokeReason are the operator's, for LostRevoked.
	RevokedBy, RevokeReason string
}

// Error implements error.
func (e *LostError) Error() string {
	if e.Reason == LostMoved {
		return fmt.Sprintf("lease: lost (the session moved to epoch %d)", e.Epoch)
	}
	return "lease: lost (" + e.Reason + ")"
}

// Is makes errors.Is(err, ErrLost) true.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// lostFor classifies why the holding (token, through ref when ref is not
// nil) is not the stored record's live holding at now. atOrAbove makes a
// record of ref's session at ref's own epoch count as moved too (a
// takeover needs a strictly lower epoch).
func lostFor(stored *Record, token int64, ref *SessionRef, atOrAbove bool, now time.Time) *LostError {
	cur := existing(stored)
	switch {
	case cur == nil:
		return &LostError{Reason: LostDeleted}
	case ref != nil && cur.SessionKey == ref.Key && (cur.SessionEpoch > ref.Epoch || atOrAbove && cur.SessionEpoch == ref.Epoch):
		return &LostError{Reason: LostMoved, Epoch: cur.SessionEpoch}
	case cur.FencingToken != token:
		return &LostError{Reason: LostTaken}
	case cur.RevokeReason != "":
		return &LostError{Reason: LostRevoked, RevokedBy: cur.RevokedBy, RevokeReason: cur.RevokeReason}
	case now.Before(cur.ExpireTime):
		return &LostError{Reason: LostTaken} // live, but not this caller's holding (holder, principal, session)
	case cur.SessionKey != "" || !view(cur, now).Released():
		return &LostError{Reason: LostExpired} // ran out, or its session expired (ExpireSession keeps the session)
	}
	return &LostError{Reason: LostReleased}
}
