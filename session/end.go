package session

import (
	"context"
	"errors"
	"sync"

	"github.com/leasesvc/leasesvc/lease"
)

// endPlan is what a session's end carries out, taken under the session's
// lock by the step into phaseEnding (phase.go).
type endPlan struct {
	kind endKind
	do   effect // what is left to do
	ref  Ref
	hs   []held
	rec  held
	conn Conn // the socket `ended` goes to; nil once it went
}

// planEndLocked takes what the end of kind must write; s.mu held.
func (s *Session) planEndLocked(kind endKind, do effect) *endPlan {
	e := &endPlan{kind: kind, do: do, ref: s.ref(), hs: make([]held, 0, len(s.leases)), rec: s.record, conn: s.conn}
	for _, h := range s.leases {
		e.hs = append(e.hs, *h)
	}
	return e
}

// writeEnd carries out the end of a session that a step moved into
// phaseEnding, and then steps it to phaseGone (evEndWritten, or
// evEndAbandoned when ctx ran out while a lapse waited its window).
func (s *Session) writeEnd(ctx context.Context, e *endPlan) error {
	decided(s, e.kind)
	s.r.leave(s, e.hs)
	if e.do.has(effPushEnded) {
		s.pushEnded(e)
	}
	if e.do.has(effWait) && !s.sleep(ctx, s.window) {
		// The record ran out (docs/contract.md §14 Death): acks stopped
		// when the end began; every heartbeat acked was received before,
		// so a window from then the agent has stopped. Without that
		// window the leases run out at their TTL.
		s.endStep(ctx, e, evEndAbandoned)
		return ctx.Err()
	}
	if e.do.has(effReadRecord) {
		// One read spares a write per lease when the session moved on.
		if r, err := s.r.b.Get(ctx, e.rec.name); err == nil && (r.Key != e.ref.Key || r.Epoch != e.ref.Epoch) {
			s.endStep(ctx, e, evFoundMoved)
		}
	}
	switch {
	case e.do.has(effRelease):
		s.endWrites(ctx, e, s.r.b.Release)
	case e.do.has(effExpire):
		n := s.endWrites(ctx, e, s.r.b.Expire)
		s.r.observe(func(o Observer) { o.ExpiredReleases(n) })
	}
	s.endStep(ctx, e, evEndWritten)
	return nil
}

// endStep steps the ending session by ev and carries out what that does:
// the audit line, the metrics, the `ended` push, the registry's books.
func (s *Session) endStep(ctx context.Context, e *endPlan, ev eventKind) {
	s.mu.Lock()
	eff := s.step(event{kind: ev})
	s.mu.Unlock()
	e.kind, e.do = eff.kind, eff.do
	if e.do.has(effAudit) {
		line := endLines[e.kind]
		s.r.cfg.Audit.Session(ctx, line.action, "ok", s.principal, s.ShortKey(), line.detail)
	}
	if e.do.has(effObserveEnd) {
		s.r.observe(func(o Observer) { o.SessionEnded(e.kind.String()) })
	}
	if e.do.has(effPushEnded) {
		s.pushEnded(e)
	}
	if e.do.has(effDone) {
		s.r.finishEnd()
	}
}

// pushEnded tells the end's socket, once, that the session no longer
// lives on it. It is not queued under the lock: the session acks nothing
// more.
func (s *Session) pushEnded(e *endPlan) {
	if reason := endLines[e.kind].ended; e.conn != nil && reason != "" {
		e.conn.Push(Push{Type: PushEnded, Reason: reason})
		e.conn = nil
	}
}

// endWrites ends every lease of the plan with write (a release, or an
// expiry at the session's epoch: a compare-and-set that cannot touch a
// session that moved), then releases the record. It returns how many
// leases it ended.
func (s *Session) endWrites(ctx context.Context, e *endPlan, write func(context.Context, Ref, lease.ReleaseRequest) (lease.Lease, error)) int64 {
	log := s.r.cfg.Logger.With("session", s.ShortKey())
	var n int64
	var mu sync.Mutex
	s.r.fanOut(e.hs, func(h held) {
		_, err := write(ctx, e.ref, lease.ReleaseRequest{Name: h.name, Holder: h.holder, FencingToken: h.token, Principal: s.principal})
		switch {
		case err == nil:
			mu.Lock()
			n++
			mu.Unlock()
		case errors.Is(err, lease.ErrLost):
		default:
			log.Warn("session: ending a lease failed; it runs out at its TTL", "lease", h.name, "err", err)
		}
	})
	rec := e.rec
	if _, err := s.r.b.Release(ctx, e.ref, lease.ReleaseRequest{Name: rec.name, Holder: rec.holder, FencingToken: rec.token, Principal: s.principal}); err != nil && !errors.Is(err, lease.ErrLost) {
		log.Warn("session: ending the session record failed; it runs out at its TTL", "err", err)
	}
	return n
}
