package lease

import (
	"context"
	"time"
)

// ExpireSession ends a session-held holding because its session died
// (docs/contract.md §14): req.Session is required, and the holding must be
// held through it at its epoch (ErrLost when the record moved on: another
// epoch, another holding, a plain release). It reports a released event
// with Reason ReasonSessionExpired, and keeps the record's session, so
// that a resume may restart the holding with its token while nobody took
// the lease (TakeOver). A holding that already ended is left as it is.
func (m *Manager) ExpireSession(ctx context.Context, req ReleaseRequest) (Lease, error) {
	cp, err := checkRelease(req)
	if err == nil && req.Session == nil {
		var v violations
		v.add("session", "is required")
		err = v.err()
	}
	if err != nil {
		return Lease{}, err
	}
	return m.end(ctx, "expire session", req.Name, endRequest{holder: req.Holder, principal: req.Principal, token: req.FencingToken,
		checkpoint: cp, session: req.Session, reason: ReasonSessionExpired})
}

// TakeOverRequest moves a session-held holding to a new ownership epoch
// (a resume, docs/contract.md §14).
type TakeOverRequest struct {
	// Name is the lease name (a session's own record included).
	Name string
	// Holder is the holding's holder.
	Holder string
	// Principal is the holding's principal.
	Principal string
	// FencingToken is the token of the holding.
	FencingToken int64
	// TTL extends the holding from the decision: the session lease TTL,
	// a whole number of milliseconds > 0.
	TTL time.Duration
	// Session is the session at its new epoch, with its window.
	Session SessionRef
}

// TakeOver moves a session-held holding to epoch req.Session.Epoch: the
// record must hold (Name, Holder, Principal, FencingToken) through the
// session req.Session.Key at an epoch strictly lower than
// req.Session.Epoch, so that of two racing takeovers at one epoch only the
// first wins. It writes the new epoch and window and extends the holding
// by req.TTL. A holding that ended (ran out, or ExpireSession) while
// nobody acquired since, not revoked and not reserved for another, is
// restarted with the same token; no event reports that, as the token's
// events already went out. Anything else is ErrLost.
func (m *Manager) TakeOver(ctx context.Context, req TakeOverRequest) (Lease, error) {
	var v violations
	checkName(&v, req.Name)
	checkHolder(&v, req.Holder)
	checkToken(&v, req.FencingToken)
	checkSessionTTL(&v, req.TTL)
	checkSession(&v, &req.Session, true)
	if err := v.err(); err != nil {
		return Lease{}, err
	}
	snap, err := m.loop.Update(ctx, req.Name, func(s Snapshot) (*Record, error) {
		return decideTakeOver(s.Record, req, decisionTime(s))
	})
	if err != nil {
		return Lease{}, opError("take over", req.Name, err)
	}
	return view(snap.Record, decisionTime(snap)), nil
}
