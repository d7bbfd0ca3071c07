package session

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// retryAfterFailure is how soon a renewal round that failed (backend
// unavailable) is tried again.
const retryAfterFailure = time.Second

// timerBox holds a Timer for an atomic.Pointer.
type timerBox struct{ Timer }

// startRenewals arms the session's renewal rounds: every TTL/3, and its
// record's when a third of the record's TTL has passed, until the
// session ends. No goroutine waits between rounds (a session holding
// still costs its socket's reader alone): the timer starts one for each.
func (s *Session) startRenewals() {
	t := &timerBox{s.clock.AfterFunc(s.ttl/3, s.renewRounds)}
	s.renewT.Store(t)
	switch {
	case s.stopped(): // it ended first (stopLocked found no timer)
		t.Stop()
	case s.kicked.Load() && t.Stop(): // a Kick came first
		go s.renewRounds()
	}
}

// renewRounds runs a renewal round, another at once while a Kick came
// during it, and sets the timer for the next, unless the session ended.
// One runs at a time: it starts from the timer firing, or from a Kick that
// stopped the timer, and sets the timer again only as it returns.
func (s *Session) renewRounds() {
	every := s.ttl / 3
	t := s.renewT.Load()
	for t == nil { // fired before startRenewals stored it: a moment
		runtime.Gosched()
		t = s.renewT.Load()
	}
	for {
		if s.stopped() {
			return
		}
		s.kicked.Store(false)
		next := every
		if !s.renewAll() {
			next = min(retryAfterFailure, every)
		}
		if s.stopped() {
			return
		}
		if s.kicked.Load() {
			continue
		}
		t.Reset(next)
		if s.stopped() { // it ended as the timer was set: keep nothing armed
			t.Stop()
			return
		}
		// A Kick that came as the timer was set either stopped it (and
		// runs the round) or finds it stopped here (and this goes on).
		if !s.kicked.Load() || !t.Stop() {
			return
		}
	}
}

// stopped reports whether the session has ended.
func (s *Session) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// Kick asks for a renewal round now (tests, and after the event stream
// lagged): at once when none is under way, else right after it.
func (s *Session) Kick() {
	s.kicked.Store(true)
	if t := s.renewT.Load(); t != nil && t.Stop() {
		go s.renewRounds()
	}
}

// round is what one renewal round writes.
type round struct {
	ref        Ref
	hs         []held // hs[0] is the record when withRecord
	withRecord bool
}

// takeRound returns the writes of a round, or false when the session is
// not live; s.mu held.
func (s *Session) takeRoundLocked() (round, bool) {
	if s.phase != phaseLive {
		return round{}, false
	}
	rd := round{ref: s.ref()}
	if due := s.record.sent.Add(s.recordTTL / 3); !due.After(s.clock.Now()) {
		rd.withRecord = true
		rd.hs = append(rd.hs, s.record)
	}
	// A lease whose release or transfer is under way is renewed too: the
	// acks need it safe while it is in the table (a slow end would
	// otherwise stop every ack of the session), and a renewal cannot
	// revive a holding the end has ended.
	for _, h := range s.leases {
		rd.hs = append(rd.hs, *h)
	}
	return rd, true
}

// renewAll renews every lease of the session, and its record when due, at
// once (the backend batches concurrent writes). It reports whether every
// write got an answer. A lost lease leaves the session and its lost push
// is queued under the session's lock (docs/contract.md §14, S2), with the
// reason the failed write found. A write that finds the session at a
// higher epoch ends it here as moved (S4); a record that ran out ends it
// as an expiry, a window after the last ack (Death).
func (s *Session) renewAll() bool {
	s.mu.Lock()
	rd, ok := s.takeRoundLocked()
	s.mu.Unlock()
	if !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.ttl/3)
	defer cancel()
	results := make([]error, len(rd.hs))
	views := make([]lease.Lease, len(rd.hs))
	sent := s.clock.Now()
	s.r.fanOutIdx(len(rd.hs), func(i int) {
		h, ttl := rd.hs[i], s.ttl
		if rd.withRecord && i == 0 {
			ttl = s.recordTTL
		}
		views[i], results[i] = s.r.b.Renew(ctx, rd.ref, lease.RenewRequest{Name: h.name, Holder: h.holder, FencingToken: h.token, TTL: ttl, Principal: s.principal})
	})
	s.mu.Lock()
	if s.phase != phaseLive || s.epoch != rd.ref.Epoch {
		s.mu.Unlock()
		return true
	}
	ok = true
	var moved, lapsed bool
	var eff effects
	var yields []Push
	for i, err := range results {
		h := rd.hs[i]
		var le *lease.LostError
		if errors.As(err, &le) && le.Reason == lease.LostMoved {
			moved = true
			continue
		}
		if rd.withRecord && i == 0 {
			switch {
			case err == nil:
				s.record.sent = sent
			case errors.Is(err, lease.ErrLost):
				lapsed = true
			default:
				ok = false
			}
			continue
		}
		cur := s.leases[h.name]
		if cur == nil || cur.token != h.token {
			continue
		}
		if cur.lettingGo { // its release or transfer decides what becomes of it
			if err == nil {
				cur.sent = sent
			}
			continue
		}
		switch {
		case err == nil:
			cur.sent = sent
			if to := views[i].YieldTo(); to != "" && to != cur.yieldTo {
				cur.yieldTo = to
				yields = append(yields, Push{Type: PushYield, Name: h.name, FencingToken: h.token, To: to})
			}
		case errors.Is(err, lease.ErrLost):
			p := lostPush(h, le)
			eff.merge(s.step(event{kind: evLeaseLost, h: cur, push: &p}))
		default:
			ok = false
		}
	}
	if moved || lapsed {
		// It ends before the lock goes, so that no heartbeat is acked
		// after the compare-and-set failed.
		ev := evMovedOn
		if !moved {
			ev = evRecordLapsed
		}
		eff.merge(s.step(event{kind: ev}))
		s.mu.Unlock()
		ectx, cancel := context.WithTimeout(context.Background(), s.window+s.ttl)
		defer cancel()
		_ = s.carryOut(ectx, eff)
		return true
	}
	for _, p := range yields {
		s.pushLocked(p)
	}
	s.mu.Unlock()
	_ = s.carryOut(ctx, eff)
	if !ok && ctx.Err() == nil && s.ctx.Err() != nil {
		return true
	}
	return ok
}

// lostPush is the push telling the agent that h was lost, with the reason
// the failed write found (le nil: it ran out).
func lostPush(h held, le *lease.LostError) Push {
	if le == nil {
		return Push{Type: PushLost, Name: h.name, FencingToken: h.token, Reason: LostExpired}
	}
	if le.Reason == lease.LostRevoked {
		return Push{Type: PushRevoked, Name: h.name, FencingToken: h.token, Reason: le.RevokeReason, Operator: le.RevokedBy}
	}
	return Push{Type: PushLost, Name: h.name, FencingToken: h.token, Reason: le.Reason}
}
