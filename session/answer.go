package session

import (
	"context"
	"errors"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// The rules of an answer (docs/contract.md §14, Operations in flight): a
// holding is answered only while the write it answers is safe for a
// window beyond the answer (S5), and its answer is queued in the critical
// section that puts it in the session's table (S6).

// Answer makes the message that answers an acquire of l, outside the
// session's lock (it may sign a proof), and returns what queues it: that
// runs under the lock, in the critical section that puts l in the
// session's table (docs/contract.md §14, S6), so every push about l
// follows its answer on the socket. nil answers nothing (tests).
type Answer func(l lease.Lease) (queue func())

// ErrUnsafe is an acquire whose backend write was answered too late: the
// holding it wrote, and a renewal of it, were no longer safe for a window
// beyond the answer (docs/contract.md §14, S5). The holding is ended; the
// acquire may be retried (503 unavailable).
var ErrUnsafe = errors.New("session: the backend answered too late for the holding to be safe; retry")

// safeFor reports whether a write of the session sent at sent is still
// safe on the backend for a window beyond now; s.mu need not be held.
func (s *Session) safeFor(sent, now time.Time) bool {
	h := held{sent: sent}
	return !h.safeUntil(s.ttl).Before(now.Add(s.window))
}

// endSent is the holding of a lease this instance sent an end of, and
// when.
type endSent struct {
	token int64
	at    time.Time
}

// noteEndLocked records that an end of (name, token) is being sent;
// s.mu held. Records older than twice the TTL are dropped: an acquire
// answered that late fails S5's check on its own send time.
func (s *Session) noteEndLocked(name string, token int64) {
	now := s.clock.Now()
	if s.endsSent == nil {
		s.endsSent = map[string]endSent{}
	}
	if len(s.endsSent) >= 64 {
		for n, e := range s.endsSent {
			if now.Sub(e.at) > 2*s.ttl {
				delete(s.endsSent, n)
			}
		}
	}
	if e, ok := s.endsSent[name]; !ok || e.token <= token {
		s.endsSent[name] = endSent{token: token, at: now}
	}
}

// endSentLocked reports whether an end of the holding (name, token), or
// of a later one, was sent; s.mu held.
func (s *Session) endSentLocked(name string, token int64) bool {
	e, ok := s.endsSent[name]
	return ok && e.token >= token
}

// expireUnanswered ends a holding the session wrote but will not answer
// (the session ended meanwhile, or the write was not safe): nobody leads
// it, and it must not wait for its TTL. A holding the session's table
// holds (a repeated acquire's answer was the late one) is not touched:
// it is led, and its renewals keep it.
func (s *Session) expireUnanswered(ctx context.Context, ref Ref, l lease.Lease) {
	s.mu.Lock()
	if h := s.leases[l.Name]; h != nil && h.token == l.FencingToken && s.phase == phaseLive {
		s.mu.Unlock()
		return
	}
	s.noteEndLocked(l.Name, l.FencingToken)
	s.mu.Unlock()
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ttl/3)
	defer cancel()
	_, _ = s.r.b.Expire(ectx, ref, lease.ReleaseRequest{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken, Principal: s.principal})
}

// safeAnswers writes once more each lease a resume took over whose
// takeover was answered too late to be safe for a window beyond now (S5),
// and returns the leases still taken; one the renewal finds lost moves to
// lost. A renewal that finds the session at a higher epoch is a
// *ConflictError. A lease still unsafe is left for the last check, under
// the lock, when the answer is queued.
func (r *Registry) safeAnswers(ctx context.Context, s *Session, ref Ref, leases []lease.Lease, lost *[]Lost) ([]lease.Lease, error) {
	now := s.clock.Now()
	var late []int
	for i, l := range leases {
		if h := s.leases[l.Name]; h != nil && !s.safeFor(h.sent, now) {
			late = append(late, i)
		}
	}
	if len(late) == 0 {
		return leases, nil
	}
	errs := make([]error, len(late))
	views := make([]lease.Lease, len(late))
	sent := s.clock.Now()
	r.fanOutIdx(len(late), func(j int) {
		l := leases[late[j]]
		views[j], errs[j] = r.b.Renew(ctx, ref, lease.RenewRequest{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken, TTL: s.ttl, Principal: s.principal})
	})
	gone := map[string]bool{}
	for j, i := range late {
		l := leases[i]
		var le *lease.LostError
		switch {
		case errs[j] == nil:
			leases[i] = views[j]
			s.leases[l.Name].sent = sent
		case errors.As(errs[j], &le) && le.Reason == lease.LostMoved:
			return nil, &ConflictError{Epoch: le.Epoch}
		case le != nil:
			gone[l.Name] = true
			*lost = append(*lost, Lost{Name: l.Name, FencingToken: l.FencingToken, Reason: le.Reason})
		}
	}
	if len(gone) == 0 {
		return leases, nil
	}
	kept := leases[:0:0]
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range leases {
		if gone[l.Name] {
			s.step(event{kind: evLeaseLost, h: s.leases[l.Name]}) // opening: the answer lists it lost
			continue
		}
		kept = append(kept, l)
	}
	return kept, nil
}
