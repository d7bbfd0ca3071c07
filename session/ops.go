package session

import (
	"context"
	"errors"
	"sync"

	"github.com/leasesvc/leasesvc/lease"
)

// withSession bounds ctx by the session's life: an acquire still waiting
// when the session ends stops.
func (s *Session) withSession(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// Acquire acquires a lease into the session, at the session's TTL and for
// its principal, and queues its answer (answer, if not nil) under the
// session's lock as the lease enters the session's table. The answer goes
// out only while the write it answers is safe for a window beyond that
// moment (S5): an acquire answered late by the backend is renewed once
// first, and is ErrUnsafe when the holding ran out meanwhile or the
// renewal is late too (its holding then ended). Beyond the session's lease limit it returns a *LimitError.
func (s *Session) Acquire(ctx context.Context, req lease.AcquireRequest, answer Answer) (lease.Lease, error) {
	s.mu.Lock()
	if s.phase != phaseLive {
		s.mu.Unlock()
		return lease.Lease{}, ErrClosed
	}
	if _, has := s.leases[req.Name]; !has && len(s.leases)+s.pending >= s.r.cfg.MaxLeases {
		s.mu.Unlock()
		return lease.Lease{}, &LimitError{What: "leases of this session", Max: s.r.cfg.MaxLeases}
	}
	s.pending++
	ref := s.ref()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.pending--
		s.mu.Unlock()
	}()
	req.Principal, req.TTL = s.principal, s.ttl
	ctx, cancel := s.withSession(ctx)
	defer cancel()
	// The write's safety counts from the send of the attempt that made
	// it: a waiting acquire's last attempt, not its first.
	var attemptMu sync.Mutex
	attempt := s.clock.Now()
	req.OnAttempt = func() {
		now := s.clock.Now()
		attemptMu.Lock()
		attempt = now
		attemptMu.Unlock()
	}
	l, err := s.r.b.Acquire(ctx, ref, req)
	attemptMu.Lock()
	sent := attempt
	attemptMu.Unlock()
	if err != nil {
		if s.movedOn(err) || s.ctx.Err() != nil {
			return lease.Lease{}, ErrClosed
		}
		return lease.Lease{}, err
	}
	for renewed := false; ; renewed = true {
		var queue func()
		if answer != nil {
			queue = answer(l)
		}
		s.mu.Lock()
		if s.phase == phaseLive {
			switch {
			case s.leases[l.Name] != nil && s.leases[l.Name].token > l.FencingToken:
				// A later holding's answer came first (acquires and a
				// release answered out of order): the table keeps the
				// later token, and this stale answer leads nothing.
				s.mu.Unlock()
				return lease.Lease{}, &lease.LostError{Reason: lease.LostTaken}
			case s.endSentLocked(l.Name, l.FencingToken):
				// This instance sent an end of the holding (a release or
				// transfer under way, an expiry): decided before it, the
				// acquire must not answer a holding that may have ended.
				s.mu.Unlock()
				return lease.Lease{}, ErrUnsafe
			case s.leases[l.Name] != nil && s.leases[l.Name].token == l.FencingToken:
				// The holding is the table's already (a repeated
				// acquire): it keeps what the table knows of it (its
				// takeover time, its yield), and its last write is the
				// later of the two.
				cur := s.leases[l.Name]
				if sent.After(cur.sent) {
					cur.sent = sent
				}
				if !s.safeFor(cur.sent, s.clock.Now()) {
					s.mu.Unlock()
					return lease.Lease{}, ErrUnsafe // the renewals answer for it; acks wait
				}
				if queue != nil {
					queue()
				}
				s.mu.Unlock()
				return l, nil
			case !s.safeFor(sent, s.clock.Now()):
				s.mu.Unlock()
				if renewed {
					s.expireUnanswered(ctx, ref, l)
					return lease.Lease{}, ErrUnsafe
				}
				// The backend answered late (S5): the holding may have
				// run out already. Write it again and answer from that
				// write.
				sent = s.clock.Now()
				renewed, err := s.r.b.Renew(ctx, ref, lease.RenewRequest{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken, TTL: s.ttl, Principal: s.principal})
				switch {
				case s.movedOn(err) || s.ctx.Err() != nil:
					return lease.Lease{}, ErrClosed
				case errors.Is(err, lease.ErrLost):
					// It ran out (and may be another's by now): a retry
					// answers what holds now.
					return lease.Lease{}, ErrUnsafe
				case err != nil:
					s.expireUnanswered(ctx, ref, l)
					return lease.Lease{}, err
				}
				l = renewed
				continue
			}
		}
		// The holding joins the table with its answer (S6); a session
		// that ended while the acquire was under way refuses it, and the
		// holding must not outlive it (S5).
		eff := s.step(event{kind: evLeaseAnswered, h: &held{name: l.Name, holder: l.Holder, token: l.FencingToken, sent: sent}, queue: queue})
		s.mu.Unlock()
		if err := s.carryOut(ctx, eff); err != nil {
			return lease.Lease{}, err
		}
		break
	}
	if since(s.clock, sent) > s.ttl/10 {
		// A waiting acquire wrote long after it was sent: its safe
		// deadline counts from the send, so renew now, before it holds
		// the session's acks back.
		s.Kick()
	}
	return l, nil
}

// lookup returns the session's holding of (name, holder, token), or
// lease.ErrLost when the session holds no such holding; s.mu held.
func (s *Session) lookup(name, holder string, token int64) (*held, error) {
	if s.phase != phaseLive {
		return nil, ErrClosed
	}
	h := s.leases[name]
	if h == nil || h.holder != holder || h.token != token || h.lettingGo {
		return nil, lease.ErrLost
	}
	return h, nil
}

// Renew writes a session lease's metadata or checkpoint (and extends it at
// the session's TTL).
func (s *Session) Renew(ctx context.Context, req lease.RenewRequest) (lease.Lease, error) {
	s.mu.Lock()
	if _, err := s.lookup(req.Name, req.Holder, req.FencingToken); err != nil {
		s.mu.Unlock()
		return lease.Lease{}, err
	}
	ref := s.ref()
	s.mu.Unlock()
	req.Principal, req.TTL = s.principal, s.ttl
	sent := s.clock.Now()
	l, err := s.r.b.Renew(ctx, ref, req)
	if s.movedOn(err) {
		return lease.Lease{}, ErrClosed
	}
	s.mu.Lock()
	var eff effects
	if h := s.leases[req.Name]; h != nil && h.token == req.FencingToken && !h.lettingGo {
		switch {
		case err == nil:
			h.sent = sent
		case errors.Is(err, lease.ErrLost):
			// The renew's own answer goes out after the lock is gone, so a
			// heartbeat acked meanwhile would vouch for a lease the agent
			// still counts: the lost push is queued here, before any later
			// ack (docs/contract.md §14, S2).
			var le *lease.LostError
			errors.As(err, &le)
			p := lostPush(*h, le)
			eff = s.step(event{kind: evLeaseLost, h: h, push: &p})
		}
	}
	s.mu.Unlock()
	_ = s.carryOut(ctx, eff)
	return l, err
}

// finish runs a write that ends a session lease (release, transfer): the
// lease leaves the session when it succeeds or the holding is gone anyway.
func (s *Session) finish(ctx context.Context, name, holder string, token int64, write func(Ref) (lease.Lease, error)) (lease.Lease, error) {
	s.mu.Lock()
	h, err := s.lookup(name, holder, token)
	if err != nil {
		s.mu.Unlock()
		return lease.Lease{}, err
	}
	h.lettingGo = true
	s.noteEndLocked(name, token) // no acquire answers this holding again
	ref := s.ref()
	s.mu.Unlock()
	l, err := write(ref)
	if s.movedOn(err) {
		return lease.Lease{}, ErrClosed
	}
	s.mu.Lock()
	if err != nil && !errors.Is(err, lease.ErrLost) {
		h.lettingGo = false
		s.mu.Unlock()
		return l, err
	}
	eff := s.step(event{kind: evLeaseLetGo, h: h})
	s.mu.Unlock()
	_ = s.carryOut(ctx, eff)
	return l, err
}

// Release releases a session lease.
func (s *Session) Release(ctx context.Context, req lease.ReleaseRequest) (lease.Lease, error) {
	req.Principal = s.principal
	return s.finish(ctx, req.Name, req.Holder, req.FencingToken, func(ref Ref) (lease.Lease, error) {
		return s.r.b.Release(ctx, ref, req)
	})
}

// Transfer hands a session lease to another holder (docs/contract.md §8).
func (s *Session) Transfer(ctx context.Context, req lease.TransferRequest) (lease.Lease, error) {
	req.Principal = s.principal
	return s.finish(ctx, req.Name, req.Holder, req.FencingToken, func(ref Ref) (lease.Lease, error) {
		return s.r.b.Transfer(ctx, ref, req)
	})
}

// Leases is the number of leases the session holds.
func (s *Session) Leases() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases)
}

// movedOn reports whether err is a write through the session that found
// it at a higher epoch, and then ends the session here as moved
// (docs/contract.md §14, S4): no ack after, nothing more written.
func (s *Session) movedOn(err error) bool {
	var le *lease.LostError
	if !errors.As(err, &le) || le.Reason != lease.LostMoved {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl/3)
	defer cancel()
	_, _ = s.event(ctx, event{kind: evMovedOn})
	return true
}
