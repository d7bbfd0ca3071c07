package session

import (
	"context"

	"github.com/leasesvc/leasesvc/lease"
)

// SessionExpired is the reason of a released event on session death.
const SessionExpired = lease.ReasonSessionExpired

// follow delivers the hub's events of every lease a session here holds to
// that session, until the returned stop is called.
func (r *Registry) follow() func() {
	sub, _ := r.cfg.Events.SubscribePrefix("")
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case ev := <-sub.C:
				if sub.Lagged() {
					r.kickAll() // events were dropped: the renewals find what they said
				}
				r.mu.Lock()
				var ss []*Session
				for s := range r.names[ev.Lease.Name] {
					ss = append(ss, s)
				}
				r.mu.Unlock()
				for _, s := range ss {
					s.onEvent(ev)
				}
			}
		}
	}()
	return func() {
		r.cfg.Events.Unsubscribe(sub)
		close(done)
	}
}

// kickAll asks every session for a renewal round now.
func (r *Registry) kickAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.byKey {
		s.Kick()
	}
}

// onEvent tells the agent when ev ended one of the session's holdings that
// this instance did not end itself.
func (s *Session) onEvent(ev lease.Event) {
	s.mu.Lock()
	h := s.leases[ev.Lease.Name]
	if s.phase != phaseLive || h == nil || h.lettingGo {
		s.mu.Unlock()
		return
	}
	tok := ev.Lease.FencingToken
	p := Push{Type: PushLost, Name: h.name, FencingToken: h.token}
	switch {
	case tok < h.token, tok == h.token && ev.Type == lease.EventAcquired, tok == h.token && stale(ev, h):
		s.mu.Unlock()
		return
	case tok > h.token:
		p.Reason = LostTaken
	case ev.Type == lease.EventRevoked:
		p = Push{Type: PushRevoked, Name: h.name, FencingToken: h.token, Reason: ev.Reason, Operator: ev.Operator}
	case ev.Type == lease.EventReleased && ev.Reason == SessionExpired:
		p.Reason = LostExpired
	case ev.Type == lease.EventReleased:
		p.Reason = LostReleased
	case ev.Type == lease.EventDeleted:
		p.Reason = LostDeleted
	default:
		p.Reason = LostExpired
	}
	eff := s.step(event{kind: evLeaseLost, h: h, push: &p}) // p before any later ack (docs/contract.md §14, S2)
	s.mu.Unlock()
	_ = s.carryOut(context.Background(), eff)
}

// stale reports whether ev, an end of h's token, was decided no later than
// the resume that took h over: the end of the holding that the resume
// restarted (docs/contract.md §14 resume), delivered late (Pub/Sub, the
// sweeper's expired events). Such an event must not end the restarted
// holding; a real end after the takeover is later, and one the events
// miss is found by the next renewal.
func stale(ev lease.Event, h *held) bool {
	if h.since.IsZero() {
		return false
	}
	at := ev.Time
	if at.IsZero() {
		at = ev.Lease.ExpireTime
	}
	return !at.After(h.since)
}
