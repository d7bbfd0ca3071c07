package lease

import (
	"time"
)

// The rules of docs/contract.md §3, §8, §14 and §15, each a pure decision
// over the stored record (nil when there is none; a tombstone is passed as
// stored), a valid request and the server time of the read. A decision
// returns the record to write (nil: write nothing) and the refusal (nil:
// success); it reads no clock and calls no backend, so the loop may call it
// again on every retry. The Manager's methods validate the request, hand
// the decision to the loop, and build the answer and the events from what
// was written.

// acquireInput is a valid acquire as its decision sees it.
type acquireInput struct {
	req AcquireRequest
	// md is the request's metadata, normalized (nil: none given).
	md []byte
	// reg is the candidate registration of a waiting acquire, or nil.
	reg *registration
	// waitLeft is what remains of reg's wait when deciding (local clock).
	waitLeft time.Duration
	// maxCandidates bounds the registrations of one lease.
	maxCandidates int
}

// decideAcquire decides an acquire of stored at now (docs/contract.md §3
// acquire, §8, §14, §15). It returns the record to write and the refusal:
// a record with a refusal registers the caller as a candidate and refuses
// it once that is written.
func decideAcquire(stored *Record, in acquireInput, now time.Time) (*Record, error) {
	req := in.req
	// 1. Read the holding. A deleted lease is absent, but its token and
	// transitions live on in the tombstone (§15).
	cur := existing(stored)
	held := cur != nil && now.Before(cur.ExpireTime)

	// 2. The live holder again, acquired by the same principal: idempotent,
	// extended as renew extends it (§3), unless its session says otherwise
	// (§3 session-held holdings).
	if held && cur.Holder == req.Holder && cur.Principal == req.Principal {
		switch {
		case !sessionHeld(cur):
			// A plain holding; through a session it joins that session.
		case req.Session == nil || cur.SessionKey != req.Session.Key:
			return nil, ErrSessionHeld // only its session renews it
		case cur.SessionEpoch > req.Session.Epoch:
			return nil, &LostError{Reason: LostMoved, Epoch: cur.SessionEpoch} // the session moved on to a later epoch
		}
		// At the session's epoch, or at an earlier one of the same session
		// (an acquire whose answer was lost with a dropped socket, not
		// claimed by the resume): the holding joins the current epoch, and
		// the earlier owner's writes fail their compare-and-set.
		next := *cur
		if req.Session != nil {
			setSession(&next, req.Session)
		}
		next.TTL = req.TTL
		next.RenewTime = now
		next.ExpireTime = now.Add(req.TTL)
		if in.md != nil {
			next.Metadata = in.md
		}
		next.Candidates = withoutHolder(cur, now, req.Holder, req.Principal)
		return &next, nil
	}

	// 3. Held by another holder (or the same name under another
	// principal): lease_held. Free but reserved for another holder or
	// principal (§8 reservation): lease_reserved.
	var refusal error
	if held {
		refusal = &HeldError{Lease: view(cur, now)}
	} else if who, principal, until := reservation(cur, now); who != "" && (who != req.Holder || principal != req.Principal) {
		refusal = &ReservedError{Lease: view(cur, now), ReservedFor: who, Until: until}
	}

	// 4. Refused: a waiting candidate registers in the record (or keeps its
	// registration) and is refused once that is written; with nothing to
	// change, it is refused with nothing written (§8 candidates, limits).
	if refusal != nil {
		if in.reg == nil {
			return nil, refusal
		}
		cs, changed := register(cur, now, req.Holder, req.Principal, in.reg, in.waitLeft, in.maxCandidates)
		if !changed {
			return nil, refusal
		}
		next := *cur
		next.Candidates = cs
		return &next, refusal
	}

	// 5. Free and open to the caller: a new holding with the next token
	// and transition, the caller's principal and priority, no revocation,
	// the checkpoint inherited (§8 checkpoint) and the caller's own
	// registration gone (§8 candidates). A deletion took the checkpoint and
	// the candidates with it (§15).
	next := &Record{
		Name: req.Name, Holder: req.Holder, FencingToken: 1, TTL: req.TTL,
		AcquireTime: now, RenewTime: now, ExpireTime: now.Add(req.TTL),
		Transitions: 1, Metadata: in.md, Principal: req.Principal, Priority: req.Priority,
	}
	if stored != nil {
		next.FencingToken = stored.FencingToken + 1
		next.Transitions = stored.Transitions + 1
	}
	if cur != nil {
		next.Checkpoint, next.CheckpointToken = cur.Checkpoint, cur.CheckpointToken
		next.Candidates = withoutHolder(cur, now, req.Holder, req.Principal)
	}

	// 6. Through a session, the holding records it (§14); otherwise it is
	// held through none.
	if req.Session != nil {
		setSession(next, req.Session)
	}
	return next, nil
}

// decideRenew decides a renew of stored at now (docs/contract.md §3 renew,
// §8 checkpoint, §14): md and cp are the request's metadata and checkpoint,
// normalized (nil keeps the stored one).
func decideRenew(stored *Record, req RenewRequest, md, cp []byte, now time.Time) (*Record, error) {
	// 1. Only the live holding of that holder, token and principal renews;
	// anything else is lease_lost, and an expired holding is never revived.
	// The refusal says why (LostError), so a session needs no read to
	// tell its agent (§14).
	cur := stored
	if !holds(cur, req.Holder, req.Principal, req.FencingToken) || !now.Before(cur.ExpireTime) {
		return nil, lostFor(stored, req.FencingToken, req.Session, false, now)
	}

	// 2. Through a session, the record must be held through it at its
	// epoch; without one, a session-held holding is only its session's to
	// renew (§3 session-held holdings).
	switch {
	case req.Session != nil && !sameSession(cur, req.Session):
		return nil, lostFor(stored, req.FencingToken, req.Session, false, now)
	case req.Session == nil && sessionHeld(cur):
		return nil, ErrSessionHeld
	}

	// 3. Extend from now: the given TTL or the holding's, the given
	// metadata or the stored, the given checkpoint under this token (§8);
	// registrations whose place ran out are dropped.
	next := *cur
	if req.Session != nil {
		setSession(&next, req.Session)
	}
	if req.TTL != 0 {
		next.TTL = req.TTL
	}
	next.RenewTime = now
	next.ExpireTime = now.Add(next.TTL)
	if md != nil {
		next.Metadata = md
	}
	if cp != nil {
		next.Checkpoint, next.CheckpointToken = cp, cur.FencingToken
	}
	next.Candidates = kept(cur, now)
	return &next, nil
}

// endRequest is an end of a holding as its decision sees it: a release, a
// transfer (to set) or ExpireSession (reason ReasonSessionExpired).
type endRequest struct {
	holder, principal string
	token             int64
	// checkpoint is the one to write, normalized; nil keeps the stored one.
	checkpoint []byte
	// to and toPrincipal name a transfer's successor, reserved for
	// reserve; to is "" for a release.
	to, toPrincipal string
	reserve         time.Duration
	// session is the session the end comes through, or nil.
	session *SessionRef
	// reason is the released event's: ReasonSessionExpired or "".
	reason string
}

// decideEnd decides a release, a transfer or ExpireSession of stored at
// now (docs/contract.md §3 release, §8 transfer and checkpoint, §14). It
// returns the record to write, whether the write ends the holding (a
// released event) rather than only writing a checkpoint into a holding
// that already ended, and the refusal.
func decideEnd(stored *Record, e endRequest, now time.Time) (next *Record, ended bool, err error) {
	// 1. Only the holding of that holder, token and principal, live or
	// not, ends; a revoked holding is lost, not released.
	cur := stored
	if !holds(cur, e.holder, e.principal, e.token) || cur.RevokeReason != "" {
		return nil, false, lostFor(stored, e.token, e.session, false, now)
	}

	// 2. Through a session, the record must be held through it at its
	// epoch, or have ended by a release that cleared its session (a
	// repeated release, which changes nothing, succeeds as a plain one
	// does). A plain end of a live session-held holding is session_held:
	// only its session ends it, so that the session's lost push comes
	// before any ack that no longer covers it (§3, §14).
	switch {
	case e.session != nil && !sameSession(cur, e.session) && (sessionHeld(cur) || now.Before(cur.ExpireTime)):
		return nil, false, lostFor(stored, e.token, e.session, false, now)
	case e.session == nil && sessionHeld(cur) && now.Before(cur.ExpireTime):
		return nil, false, ErrSessionHeld
	}

	// 3. The checkpoint is this holding's to write, live or not, while
	// nobody has acquired since (§8 checkpoint).
	n := *cur
	if e.checkpoint != nil {
		n.Checkpoint, n.CheckpointToken = e.checkpoint, cur.FencingToken
	}

	// 4. Already ended: a repeat succeeds and changes nothing but the
	// checkpoint (§3 release). A transfer repeats only the same transfer:
	// a holding that ended otherwise has nothing left to hand over (§8
	// transfer).
	if !now.Before(cur.ExpireTime) {
		if e.to != "" && (cur.ReservedFor != e.to || cur.ReservedPrincipal != e.toPrincipal || cur.ReservedUntil.IsZero()) {
			return nil, false, ErrLost
		}
		if e.checkpoint == nil || string(e.checkpoint) == string(cur.Checkpoint) {
			return nil, false, nil
		}
		return &n, false, nil
	}

	// 5. Live: end it now, token kept. ExpireSession keeps the record's
	// session, so that a resume may restart the holding (decideTakeOver);
	// any other end clears it. A transfer reserves the lease for its
	// successor (§8 reservation 1).
	n.ExpireTime = now
	if e.reason != ReasonSessionExpired {
		clearSession(&n)
	}
	if e.to != "" {
		n.ReservedFor, n.ReservedPrincipal, n.ReservedUntil = e.to, e.toPrincipal, now.Add(e.reserve)
	}
	n.Candidates = kept(cur, now)
	return &n, true, nil
}

// decideRevoke decides an operator's revoke of stored at now
// (docs/contract.md §3 revoke). Nothing to write and no refusal means the
// lease was not held: nothing to revoke.
func decideRevoke(stored *Record, req RevokeRequest, now time.Time) (*Record, error) {
	// 1. A lease that never existed, or was deleted, is not found (§15).
	cur := existing(stored)
	switch {
	case cur == nil:
		return nil, ErrNotFound
	// 2. A given token revokes only that live holding.
	case req.FencingToken != 0 && (cur.FencingToken != req.FencingToken || !now.Before(cur.ExpireTime)):
		return nil, ErrLost
	// 3. Not held (released, expired, already revoked): nothing to do.
	case !now.Before(cur.ExpireTime):
		return nil, nil
	}

	// 4. End the live holding now, whoever holds it: token kept, the
	// operator and the reason recorded.
	next := *cur
	next.ExpireTime = now
	next.RevokedBy = req.Operator
	next.RevokeReason = req.Reason
	return &next, nil
}

// decideDelete decides a delete of stored at now (docs/contract.md §15):
// the tombstone to write, or why the lease may not be deleted. freeFor > 0
// (the retention sweep) also requires the lease to have been free that
// long.
func decideDelete(stored *Record, freeFor time.Duration, now time.Time) (*Record, error) {
	// 1. A lease that never existed, or was deleted already, is not found.
	cur := existing(stored)
	switch {
	case cur == nil:
		return nil, ErrNotFound
	// 2. A held lease is lease_held.
	case now.Before(cur.ExpireTime):
		return nil, &HeldError{Lease: view(cur, now)}
	}

	// 3. A free lease reserved for a successor (§8 reservation) is
	// lease_reserved.
	if who, _, until := reservation(cur, now); who != "" {
		return nil, &ReservedError{Lease: view(cur, now), ReservedFor: who, Until: until}
	}

	// 4. The retention sweep deletes only what has been free long enough:
	// a new holding may have begun and ended since its scan.
	if freeFor > 0 && now.Before(cur.ExpireTime.Add(freeFor)) {
		return nil, ErrNotIdle
	}

	// 5. Leave the tombstone: the token lives on, nothing else.
	return tombstone(cur, now), nil
}

// decideTakeOver decides the takeover of a session-held holding by a new
// epoch of its session (docs/contract.md §14 resume) at now.
func decideTakeOver(stored *Record, req TakeOverRequest, now time.Time) (*Record, error) {
	// 1. The record must hold that holding (name, holder, principal, token)
	// through that session at a lower epoch: of two racing takeovers at one
	// epoch only the first wins.
	cur := existing(stored)
	if !holds(cur, req.Holder, req.Principal, req.FencingToken) || cur.SessionKey != req.Session.Key || cur.SessionEpoch >= req.Session.Epoch {
		return nil, lostFor(stored, req.FencingToken, &req.Session, true, now)
	}

	// 2. A holding that ended (ran out, or ExpireSession) restarts with
	// its token only while it is still its own: not revoked, not reserved
	// for another (nobody acquired since, or step 1 would have failed).
	next := *cur
	if !now.Before(cur.ExpireTime) {
		if cur.RevokeReason != "" {
			return nil, &LostError{Reason: LostRevoked, RevokedBy: cur.RevokedBy, RevokeReason: cur.RevokeReason}
		}
		if who, principal, _ := reservation(cur, now); who != "" && (who != req.Holder || principal != req.Principal) {
			return nil, &LostError{Reason: LostReleased}
		}
		next.ReservedFor, next.ReservedPrincipal, next.ReservedUntil = "", "", time.Time{}
	}

	// 3. Write the new epoch and window and extend the holding by the
	// session lease TTL; the holder's own registration goes.
	setSession(&next, &req.Session)
	next.TTL = req.TTL
	next.RenewTime = now
	next.ExpireTime = now.Add(req.TTL)
	next.Candidates = withoutHolder(cur, now, req.Holder, req.Principal)
	return &next, nil
}

// decideWithdraw decides taking the candidate registration id out of
// stored at now, when its acquire stops waiting without the lease
// (docs/contract.md §8 liveness of a candidate): the record to write, or
// nil when nothing changes.
func decideWithdraw(stored *Record, id string, now time.Time) *Record {
	cs, changed := unregister(stored, now, id)
	if !changed {
		return nil
	}
	next := *stored
	next.Candidates = cs
	return &next
}

// decideGet decides what get shows of stored at now (docs/contract.md §3
// get, §15): the lease, held or not, or ErrNotFound when it never existed
// or was deleted.
func decideGet(stored *Record, now time.Time) (Lease, error) {
	if existing(stored) == nil {
		return Lease{}, ErrNotFound
	}
	return view(stored, now), nil
}

// holds reports whether the stored record is the holding of holder,
// acquired by principal, with token (live or not).
func holds(cur *Record, holder, principal string, token int64) bool {
	return cur != nil && cur.Holder == holder && cur.Principal == principal && cur.FencingToken == token
}
