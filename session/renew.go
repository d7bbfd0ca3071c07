package session

import (
	"context"
	"errors"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// retryAfterFailure is how soon a renewal round that failed (backend
// unavailable) is tried again.
const retryAfterFailure = time.Second

// renewLoop renews the session's record and leases every TTL/3 until the
// session ends.
func (s *Session) renewLoop() {
	every := s.ttl / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.kick:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		next := every
		if !s.renewAll() {
			next = min(retryAfterFailure, every)
		}
		t.Reset(next)
	}
}

// Kick asks for a renewal round now (tests, and after the event stream
// lagged).
func (s *Session) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// renewAll renews every lease of the session and its record at once (the
// backend batches concurrent writes). It reports whether every write got an
// answer; a lost lease is pushed and leaves the session, a lost record
// means the session moved and ends here.
func (s *Session) renewAll() bool {
	s.mu.Lock()
	if s.state != live {
		s.mu.Unlock()
		return true
	}
	ref := s.ref()
	hs := []held{s.record}
	for _, h := range s.leases {
		if !h.ending {
			hs = append(hs, *h)
		}
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, s.ttl/3)
	defer cancel()
	ok := true
	moved := false
	var lost []held
	var yields []Push
	results := make([]error, len(hs))
	sent := time.Now()
	views := make([]lease.Lease, len(hs))
	s.r.fanOutIdx(len(hs), func(i int) {
		h := hs[i]
		views[i], results[i] = s.r.b.Renew(ctx, ref, lease.RenewRequest{Name: h.name, Holder: h.holder, FencingToken: h.token, TTL: s.ttl, Principal: s.principal})
	})
	s.mu.Lock()
	if s.state != live || s.epoch != ref.Epoch {
		s.mu.Unlock()
		return true
	}
	for i, err := range results {
		h := hs[i]
		if i == 0 {
			switch {
			case err == nil:
				s.record.sent = sent
			case errors.Is(err, lease.ErrLost):
				moved = true
			default:
				ok = false
			}
			continue
		}
		cur := s.leases[h.name]
		if cur == nil || cur.token != h.token || cur.ending {
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
			delete(s.leases, h.name)
			lost = append(lost, h)
		default:
			ok = false
		}
	}
	if moved {
		// The session moved: mark it ended before the lock goes, so that
		// no heartbeat is acked after the compare-and-set failed.
		e := s.beginEndLocked()
		s.mu.Unlock()
		_ = s.finishEnd(context.Background(), endMoved, e)
		return true
	}
	s.mu.Unlock()
	for _, p := range yields {
		s.push(p)
	}
	readCtx, cancelRead := context.WithTimeout(context.Background(), s.ttl/3)
	defer cancelRead()
	for _, h := range lost {
		s.r.untrack(h.name, s)
		reason, l := s.r.lostReason(readCtx, h.name, h.token)
		if reason == LostRevoked {
			s.push(Push{Type: PushRevoked, Name: h.name, FencingToken: h.token, Reason: l.RevokeReason, Operator: l.RevokedBy})
			continue
		}
		s.push(Push{Type: PushLost, Name: h.name, FencingToken: h.token, Reason: reason})
	}
	if !ok && ctx.Err() == nil && s.ctx.Err() != nil {
		return true
	}
	return ok
}
