package lease

import (
	"context"
	"unicode"
	"unicode/utf8"
)

// MaxReasonLen is the longest revocation reason, in characters.
const MaxReasonLen = 512

// RevokeRequest ends a holding on an operator's authority (the HTTP
// :revoke method).
type RevokeRequest struct {
	// Name is the lease name.
	Name string
	// Reason says why; it is stored with the lease and carried by the
	// revoked event. Required, 1–MaxReasonLen printable characters.
	Reason string
	// FencingToken, if not 0, revokes only that holding: when it is not the
	// current live holding the revoke is ErrLost.
	FencingToken int64
	// Operator is the authenticated principal revoking ("" without
	// authentication).
	Operator string
}

// ValidateRevoke checks req and returns an *InvalidError naming every bad
// field, or nil.
func ValidateRevoke(req RevokeRequest) error {
	var v violations
	checkName(&v, req.Name)
	switch n := utf8.RuneCountInString(req.Reason); {
	case n == 0:
		v.add("reason", "is required")
	case n > MaxReasonLen:
		v.add("reason", "must be at most %d characters, got %d", MaxReasonLen, n)
	case !utf8.ValidString(req.Reason):
		v.add("reason", "must be valid UTF-8")
	default:
		for _, r := range req.Reason {
			if !unicode.IsPrint(r) {
				v.add("reason", "must contain printable characters only, got %U", r)
				break
			}
		}
	}
	if req.FencingToken < 0 || req.FencingToken > MaxToken {
		v.add("fencingToken", "must be an integer between 1 and %d when given", int64(MaxToken))
	}
	return v.err()
}

// Revoke ends the live holding of req.Name now, whoever holds it: its
// expire time becomes the decision time and the record keeps the operator
// and the reason, so the holder's next renew or release is ErrLost and the
// next acquire gets the next token. A lease that is not held is returned
// unchanged (there is nothing to revoke); one that never existed, or was
// deleted, is ErrNotFound.
func (m *Manager) Revoke(ctx context.Context, req RevokeRequest) (Lease, error) {
	if err := ValidateRevoke(req); err != nil {
		return Lease{}, err
	}
	wrote := false
	snap, err := m.loop.Update(ctx, req.Name, func(s Snapshot) (*Record, error) {
		next, err := decideRevoke(s.Record, req, decisionTime(s))
		wrote = next != nil
		return next, err
	})
	if err != nil {
		return Lease{}, opError("revoke", req.Name, err)
	}
	l := view(snap.Record, decisionTime(snap))
	if wrote {
		m.changed(Event{Type: EventRevoked, Lease: l, Time: l.ServerTime, Reason: req.Reason, Operator: req.Operator})
	}
	return l, nil
}
