package session

import (
	"context"

	"github.com/leasesvc/leasesvc/lease"
)

// The states of a session on this instance and the one function that moves
// a session between them (docs/contract.md §14, Session states: the table
// there is this file's). Every entry point (the socket's messages, the
// death timer, the renewals, the events, the registry's register and
// shutdown) takes the session's lock, calls step with what happened, lets
// the lock go and calls carryOut with what step returned. step carries out
// itself what must happen under the lock: the phase, the session's table,
// the timers, and what is queued on the socket (an ack and a loss in one
// critical section, S2; a lease's answer with the lease entering the
// table, S6). carryOut does the rest: the registry's books, the backend's
// writes, the audit line and the metrics.

// phase is where a session is in its life on this instance.
type phase uint8

const (
	// phaseOpening: Open is writing its record, or Resume taking it over;
	// it is not registered, so no event, renewal or heartbeat reaches it.
	phaseOpening phase = iota
	// phaseLive: registered and attached to its socket: it acks, renews,
	// and serves lease operations.
	phaseLive
	// phaseEnding: its end, of the session's kind, is decided: no ack, no
	// renewal, no lease operation; the end's writes are under way.
	phaseEnding
	// phaseGone: its end is written (or was never needed); nothing more
	// happens to it here.
	phaseGone
)

func (p phase) String() string {
	return [...]string{"opening", "live", "ending", "gone"}[p]
}

// endKind says why a session ends.
type endKind uint8

const (
	endClosed   endKind = iota // a close message: release everything
	endExpired                 // no message for a window: expire everything (session_expired)
	endMoved                   // resumed elsewhere: touch nothing
	endShutdown                // the instance stopped and the agent neither moved nor sent a message for a window
	endLapsed                  // the session record ran out: a window after the last ack, as endExpired
)

// String is the kind as Observer.SessionEnded and the metrics name it.
func (k endKind) String() string {
	return [...]string{"closed", "expired", "moved", "shutdown", "lapsed"}[k]
}

// endLines are what each kind of end writes to the audit trail (action,
// detail) and pushes to the socket (the reason of `ended`; "" pushes
// nothing: after close the socket answers `closed` itself).
var endLines = [...]struct{ action, detail, ended string }{
	endClosed:   {"session_close", "", ""},
	endExpired:  {"session_expire", "no heartbeat for the window", "the session expired: no message for its window"},
	endMoved:    {"session_moved", "resumed elsewhere", "the session was resumed elsewhere"},
	endShutdown: {"session_expire", "no heartbeat for the window (the instance shut down)", "the session expired: no message for its window"},
	endLapsed:   {"session_lapse", "its record ran out (its renewals failed for the record's TTL)", "the session record ran out"},
}

// eventKind is what happens to a session.
type eventKind uint8

const (
	evRegistered    eventKind = iota // Open or Resume registers it and attaches it to its socket
	evRefused                        // Open or Resume fails after making it (a write, a conflict)
	evAttached                       // a socket attaches (Attach)
	evSocketDropped                  // its socket closed without close (Detach)
	evMessage                        // a message other than a heartbeat arrived (Touch)
	evHeartbeat                      // a heartbeat arrived
	evMoveAsked                      // the instance asks the agent to move (shutdown, max age)
	evDeathTimer                     // the death timer fired
	evShutdown                       // the instance's drain is over (Registry.Shutdown)
	evClose                          // the agent sent close
	evMovedOn                        // a write found it at a higher epoch, or a resume here replaced it (S4)
	evRecordLapsed                   // a renewal found its record run out
	evLeaseLost                      // a write or an event found a holding of it ended
	evLeaseLetGo                     // its release or transfer of a holding was written
	evLeaseAnswered                  // an acquire's holding is answered: it joins the table
	evFoundMoved                     // the end's read of the record found the session at a later epoch
	evEndWritten                     // the end's writes are done
	evEndAbandoned                   // the end's deadline passed before its writes
	numEvents
)

func (e eventKind) String() string {
	return [...]string{"registered", "refused", "attached", "socket dropped", "message", "heartbeat",
		"move asked", "death timer", "shutdown", "close", "moved on", "record lapsed", "lease lost",
		"lease let go", "lease answered", "found moved", "end written", "end abandoned"}[e]
}

// event is one thing that happened to a session, with what step needs.
type event struct {
	kind eventKind
	// silent (evDeathTimer, evShutdown: no message for a whole window)
	// and safe (evHeartbeat: every lease safe for a window beyond now,
	// S2) are the guards; step sets them.
	silent, safe bool
	h            *held  // lease events: the table's holding, or the one joining
	push         *Push  // evLeaseLost: the loss the agent is told; evMoveAsked: the move
	queue        func() // evHeartbeat: the ack; evLeaseAnswered, evRegistered: the answer
	conn         Conn   // evAttached, evSocketDropped, evRegistered: the socket
}

// effect is one thing a transition makes happen; an effect set is their
// union. The ones marked locked are step's, under the session's lock; the
// others carryOut's, after it.
type effect uint32

const (
	effTouch            effect = 1 << iota // locked: the last message is now (S3)
	effUseConn                             // locked: the socket is ev.conn
	effForgetConn                          // locked: no socket, if ev.conn was it
	effAck                                 // locked: queue the ack (S2)
	effAnswer                              // locked: queue the answer (S6)
	effPush                                // locked: queue ev.push
	effJoin                                // locked: the holding enters the table
	effDrop                                // locked: the holding leaves the table
	effRearm                               // locked: set the death timer for the rest of the window
	effArm                                 // locked: arm the death timer for a window
	effStop                                // locked: stop the death timer and the renewals, cancel the acquires in flight
	effTrack                               // the registry routes the holding's events here
	effUntrack                             // the registry stops routing them
	effStart                               // count the session open and start its renewals
	effGiveBack                            // give back the session's slot
	effCountHeartbeat                      // Observer.Heartbeat
	effExpireUnanswered                    // end the holding written but never answered (S5)
	effRefuse                              // the entry point answers ErrClosed
	effLeave                               // leave the registry (its leases, its slot, the open count); counted as ending
	effPushEnded                           // push `ended` with the kind's reason (once)
	effWait                                // wait a window: every heartbeat acked was received before the end began (S3)
	effReadRecord                          // read the record: at a later epoch, the end is a move (evFoundMoved)
	effRelease                             // release every lease (plain released events), then the record
	effExpire                              // expire every lease (released, session_expired), then release the record
	effAudit                               // the audit line of the kind
	effObserveEnd                          // Observer.SessionEnded(kind), and ExpiredReleases for an expiry
	effDone                                // the registry stops waiting for this end (Shutdown)
)

// has reports whether every effect of x is in e.
func (e effect) has(x effect) bool { return e&x == x }

// endBegins is what every end does as it is decided.
const endBegins = effStop | effLeave

// transition is the session's state machine: in phase p (with end kind k
// once ending), event ev leads to phase next (and kind nk) with the
// effects do. It is the table of docs/contract.md §14, Session states.
func transition(p phase, k endKind, ev event) (next phase, nk endKind, do effect) {
	switch ev.kind {
	case evAttached:
		return p, k, effUseConn
	case evSocketDropped:
		return p, k, effForgetConn // the session lives on; the death timer decides
	case evMessage:
		return p, k, effTouch
	case evHeartbeat:
		if p == phaseLive && ev.safe {
			return p, k, effTouch | effCountHeartbeat | effAck
		}
		return p, k, effTouch | effCountHeartbeat
	}
	switch p {
	case phaseOpening:
		switch ev.kind {
		case evRegistered:
			return phaseLive, k, effUseConn | effTouch | effAnswer | effArm | effTrack | effStart
		case evRefused:
			return phaseGone, k, effGiveBack
		case evLeaseLost:
			return p, k, effDrop // the resume's answer lists it lost; nothing tracks it yet
		}
	case phaseLive:
		switch ev.kind {
		case evMoveAsked:
			return p, k, effPush
		case evDeathTimer, evShutdown:
			switch {
			case !ev.silent:
				return p, k, effRearm
			case ev.kind == evShutdown:
				return phaseEnding, endShutdown, endBegins | effReadRecord | effExpire
			}
			return phaseEnding, endExpired, endBegins | effReadRecord | effExpire
		case evClose:
			return phaseEnding, endClosed, endBegins | effRelease
		case evMovedOn:
			return phaseEnding, endMoved, endBegins
		case evRecordLapsed:
			return phaseEnding, endLapsed, endBegins | effPushEnded | effWait | effReadRecord | effExpire
		case evLeaseLost:
			return p, k, effDrop | effPush | effUntrack
		case evLeaseLetGo:
			return p, k, effDrop | effUntrack
		case evLeaseAnswered:
			return p, k, effJoin | effAnswer | effTrack
		}
	case phaseEnding:
		switch ev.kind {
		case evFoundMoved:
			if k != endClosed {
				return p, endMoved, 0 // nothing to write: the session is another owner's
			}
		case evEndWritten:
			do := effAudit | effObserveEnd | effDone
			if k != endClosed {
				do |= effPushEnded
			}
			return phaseGone, k, do
		case evEndAbandoned:
			return phaseGone, k, effObserveEnd | effDone
		}
	}
	switch ev.kind {
	case evLeaseAnswered:
		return p, k, effExpireUnanswered | effRefuse // S5: never hand out a holding of an ended session
	case evLeaseLost, evLeaseLetGo, evMoveAsked:
		return p, k, 0 // an ending session's end decides what becomes of its leases
	}
	return p, k, effRefuse
}

// effects is what carryOut does after a step: the effect set, and what it
// acts on.
type effects struct {
	do      effect
	kind    endKind
	untrack []string
	track   []string
	expire  *held    // effExpireUnanswered
	ref     Ref      // the session's, for effExpireUnanswered
	end     *endPlan // set by the step into phaseEnding
}

// merge adds the effects of a later step of the same critical section.
func (e *effects) merge(x effects) {
	e.do |= x.do
	e.untrack = append(e.untrack, x.untrack...)
	e.track = append(e.track, x.track...)
	if x.expire != nil {
		e.expire, e.ref = x.expire, x.ref
	}
	if x.end != nil {
		e.end, e.kind = x.end, x.kind
	}
}

// step moves the session by ev (transition) and carries out the locked
// effects; s.mu held. The caller passes what it returns to carryOut once
// the lock is gone.
func (s *Session) step(ev event) effects {
	switch ev.kind {
	case evHeartbeat:
		ev.safe = s.phase == phaseLive && s.leasesSafeLocked()
	case evDeathTimer, evShutdown:
		ev.silent = since(s.clock, s.lastRecv) >= s.window
	}
	next, kind, do := transition(s.phase, s.kind, ev)
	eff := effects{do: do, kind: kind}
	if do.has(effTouch) {
		s.lastRecv = s.clock.Now()
	}
	if do.has(effUseConn) {
		s.conn = ev.conn
	}
	if do.has(effForgetConn) && s.conn == ev.conn {
		s.conn = nil
	}
	if do.has(effDrop) {
		if ev.h == nil || s.leases[ev.h.name] != ev.h {
			// Not the table's holding (a later one replaced it): it left
			// already, and nothing is said or untracked for it.
			eff.do &^= effDrop | effPush | effUntrack
		} else {
			delete(s.leases, ev.h.name)
		}
	}
	if do.has(effJoin) {
		s.leases[ev.h.name] = ev.h
	}
	if eff.do.has(effPush) {
		s.pushLocked(*ev.push) // before any ack decided after (S2)
	}
	if (do.has(effAck) || do.has(effAnswer)) && ev.queue != nil {
		ev.queue()
	}
	if do.has(effRearm) {
		s.death.Reset(s.window - since(s.clock, s.lastRecv))
	}
	if do.has(effArm) {
		s.death = s.clock.AfterFunc(s.window, s.watchDeath)
	}
	if eff.do.has(effUntrack) {
		eff.untrack = []string{ev.h.name}
	}
	if do.has(effTrack) {
		if ev.kind == evRegistered {
			for n := range s.leases {
				eff.track = append(eff.track, n)
			}
		} else {
			eff.track = []string{ev.h.name}
		}
	}
	if do.has(effExpireUnanswered) {
		eff.expire, eff.ref = ev.h, s.ref()
	}
	if do.has(effStop) {
		s.stopLocked()
	}
	if next == phaseEnding && s.phase != phaseEnding {
		eff.end = s.planEndLocked(kind, do)
	}
	s.phase, s.kind = next, kind
	return eff
}

// leasesSafeLocked reports whether every lease of the session is safe on
// the backend for a window beyond now (S2); s.mu held.
func (s *Session) leasesSafeLocked() bool {
	need := s.clock.Now().Add(s.window)
	for _, h := range s.leases {
		if h.safeUntil(s.ttl).Before(need) {
			return false
		}
	}
	return true
}

// stopLocked stops what a live session has armed: the death timer, the
// renewals, the acquires in flight; s.mu held.
func (s *Session) stopLocked() {
	if s.death != nil {
		s.death.Stop()
	}
	close(s.stop)
	if t := s.renewT.Load(); t != nil {
		t.Stop()
	}
	s.cancel()
}

// carryOut does the effects of a step that come after the session's lock
// (the registry's books, the backend's writes, the metrics) and returns
// the entry point's error: ErrClosed for an event the phase refuses, or
// what the end's writes found.
func (s *Session) carryOut(ctx context.Context, eff effects) error {
	if eff.do.has(effCountHeartbeat) {
		s.r.observe(func(o Observer) { o.Heartbeat() })
	}
	for _, n := range eff.untrack {
		s.r.untrack(n, s)
	}
	if len(eff.track) > 0 {
		s.r.trackAll(eff.track, s)
	}
	if eff.do.has(effGiveBack) {
		s.r.unreserve(s.caller)
	}
	if eff.do.has(effStart) {
		s.r.observe(func(o Observer) { o.SessionsOpen(1) })
		s.startRenewals()
	}
	if h := eff.expire; h != nil {
		var l lease.Lease
		l.Name, l.Holder, l.FencingToken = h.name, h.holder, h.token
		s.expireUnanswered(ctx, eff.ref, l)
	}
	if eff.end != nil {
		return s.writeEnd(ctx, eff.end)
	}
	if eff.do.has(effRefuse) {
		return ErrClosed
	}
	return nil
}
