package leasemcp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// holding is one lease the session holds. Its mutable fields are guarded by
// Server.mu.
type holding struct {
	kh    *client.Holding // the Keeper's, from the acquire
	name  string
	token int64
	ttl   time.Duration
	lease client.Lease // the acquire's answer
	proof string       // the service's signed proof of the holding, "" when it gave none

	// yieldTo is the preempting candidate that asks for the lease
	// (docs/contract.md §8), as the last renewal or read answered; "" when
	// none.
	yieldTo string

	// safeUntil is the local monotonic deadline of the acquire: it bounds
	// the holding until the renewer has confirmed it (term != nil).
	safeUntil time.Time
	term      context.Context // the Elector's leading ctx, once confirmed
	stop      context.CancelFunc
	done      chan struct{} // closed when the renewer has stopped
	led       chan struct{} // closed when the renewer's first acquire was answered and it leads
	ledOnce   sync.Once
}

// alive reports whether the holding may still be acted on, and why not.
// Server.mu is held.
func (h *holding) alive(now time.Time) (bool, string) {
	if h.term != nil {
		if h.term.Err() == nil {
			return true, ""
		}
		return false, lossReason(context.Cause(h.term))
	}
	if now.Before(h.safeUntil) {
		return true, ""
	}
	return false, "the safe deadline passed before the background renewal could confirm the holding"
}

// lossReason says in words why a renewer's leading ctx ended.
func lossReason(cause error) string {
	switch {
	case errors.Is(cause, client.ErrSafeDeadline):
		return "no renew succeeded before the safe deadline (the service is unreachable or too slow): " + cause.Error()
	case errors.Is(cause, client.ErrLost):
		return "the service answered lease_lost to a renew (the holding expired, was revoked or was taken over): " + cause.Error()
	case cause == nil:
		return "the background renewal stopped"
	}
	return cause.Error()
}

// adopt starts renewing the holding kh and records it as held. It returns
// false when the session is ending; the holding is then released.
func (s *Server) adopt(kh *client.Holding, ttl time.Duration) (*holding, bool) {
	ctx, stop := context.WithCancel(context.Background())
	l := kh.Lease()
	h := &holding{
		kh: kh, name: l.Name, token: l.FencingToken, ttl: ttl, lease: l, proof: proofOf(l),
		safeUntil: kh.Deadline(),
		stop:      stop, done: make(chan struct{}), led: make(chan struct{}),
	}
	el, err := client.NewElector(s.c, l.Name, client.ElectorConfig{
		Holder: s.cfg.Holder,
		TTL:    ttl,
		Wait:   -1, // never wait on the service: a holding of another means ours is gone
		Keeper: s.cfg.Keeper,
		Logger: s.cfg.Logger,
		OnStartedLeading: func(term context.Context) {
			s.lead(h, term)
		},
		OnStoppedLeading: stop, // a term that ended is never campaigned for again
		// A yield request is the agent's to act on (lease_checkpoint,
		// lease_release): the term lasts until the agent releases the lease
		// or it is lost, never stepped down by itself.
		OnYieldRequested: func(term context.Context, to string) {
			s.noteYield(h, to)
			<-term.Done()
		},
		OnNewLeader: func(holder string) {
			if holder != s.cfg.Holder {
				s.lose(h, fmt.Sprintf("the service says %q holds it now", holder))
			}
		},
	})
	if err != nil { // the same holder and TTL just acquired it: cannot happen
		stop()
		close(h.done)
		s.cfg.Logger.Error("leasectl mcp: cannot renew", "lease", l.Name, "err", err)
	}
	s.mu.Lock()
	closing := s.closing
	if !closing {
		if old := s.held[h.name]; old != nil {
			old.stop()
		}
		s.held[h.name] = h
		delete(s.stale, h.name)
	}
	s.mu.Unlock()
	if closing {
		stop()
		if err := s.release(h); err != nil {
			s.cfg.Logger.Warn("leasectl mcp: release failed", "lease", h.name, "err", err)
		}
		return nil, false
	}
	if err == nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer close(h.done)
			if err := el.Run(ctx); err != nil {
				s.lose(h, "the background renewal failed: "+err.Error())
			}
		}()
	}
	// Until the renewer leads, the acquire's safe deadline bounds the holding.
	time.AfterFunc(time.Until(h.safeUntil), func() { s.sweep() })
	s.addHeldResource(h.name)
	s.cfg.Logger.Info("leasectl mcp: holding", "lease", h.name, "holder", s.cfg.Holder, "fencingToken", h.token)
	return h, true
}

// lead runs as the renewer's OnStartedLeading: it confirms the holding and
// waits for the term to end.
func (s *Server) lead(h *holding, term context.Context) {
	h.ledOnce.Do(func() { close(h.led) })
	tok, _ := client.TokenFromContext(term)
	s.mu.Lock()
	if s.held[h.name] != h {
		s.mu.Unlock()
		return // released or lost meanwhile: resign
	}
	if tok != h.token {
		// Our holding ran out before the renewer's first acquire, which began
		// a new one: that one is not what the agent was told; give it up.
		s.loseLocked(h, fmt.Sprintf("the holding ran out before its first renewal (the service began a new one, fencing token %d)", tok))
		s.mu.Unlock()
		return
	}
	h.term = term
	s.mu.Unlock()
	<-term.Done()
	s.sweep()
}

// noteYield records that the candidate to asks for the lease of h (""
// when nobody does any more), if h is still held, and notifies the client
// of a new request.
func (s *Server) noteYield(h *holding, to string) {
	s.mu.Lock()
	changed := s.held[h.name] == h && h.yieldTo != to
	if changed {
		h.yieldTo = to
	}
	s.mu.Unlock()
	if changed && to != "" {
		s.cfg.Logger.Info("leasectl mcp: yield requested", "lease", h.name, "fencingToken", h.token, "yieldTo", to)
		go s.notifyYield(YieldRequest{Name: h.name, FencingToken: h.token, YieldTo: to})
	}
}

// lose records h as lost for reason, if it is still held.
func (s *Server) lose(h *holding, reason string) {
	s.mu.Lock()
	found := s.held[h.name] == h
	if found {
		s.loseLocked(h, reason)
	}
	s.mu.Unlock()
}

// loseLocked takes h out of the held leases, queues its loss for the next
// tool result, stops its renewer and notifies the client. Server.mu is
// held.
func (s *Server) loseLocked(h *holding, reason string) {
	delete(s.held, h.name)
	s.stale[h.name] = h
	l := LostLease{Name: h.name, FencingToken: h.token, Reason: reason}
	s.lost = append(s.lost, l)
	h.stop()
	s.cfg.Logger.Warn("leasectl mcp: lease lost", "lease", h.name, "fencingToken", h.token, "reason", reason)
	go s.notifyLost(l)
}

// sweep takes every holding past its safe deadline out of the held
// leases.
func (s *Server) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, h := range s.held {
		if ok, why := h.alive(now); !ok {
			s.loseLocked(h, why)
		}
	}
}

// release stops the renewer of h, which the caller has taken out of the
// held leases, and releases the holding. A holding that is already over
// (released by the renewer, expired, taken by another since) is not an
// error: it is released either way.
func (s *Server) release(h *holding) error {
	// The renewer begins with an acquire of its own (the same holder's,
	// answered with this holding). Stopped while that acquire is on its
	// way, it abandons it, but the service may decide it after the
	// release below and begin a new holding nobody asked for (a token
	// more). So the release waits for that answer first, a short while
	// at most.
	wait := time.NewTimer(min(time.Until(h.safeUntil), maxFirstRenewWait))
	select {
	case <-h.led:
	case <-h.done:
	case <-wait.C:
	}
	wait.Stop()
	h.stop()
	<-h.done
	s.removeHeldResource(h.name)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ReleaseTimeout)
	defer cancel()
	_, err := h.kh.Release(ctx, nil)
	if err != nil && !errors.Is(err, client.ErrLost) {
		return fmt.Errorf("release %q (fencing token %d): %w", h.name, h.token, err)
	}
	s.cfg.Logger.Info("leasectl mcp: released", "lease", h.name, "fencingToken", h.token)
	return nil
}

// maxFirstRenewWait bounds how long a release waits for the renewer's
// first acquire to be answered (Server.release).
const maxFirstRenewWait = 2 * time.Second

// forgetStale releases a lost holding of name that the service may still
// count as live, so that an acquire by the agent begins a new holding (a
// new token) instead of reviving the lost one. It first waits for the lost
// holding's renewer to stop, so that nothing of the old holding acts on
// the new one.
func (s *Server) forgetStale(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.stale[name]
	s.mu.Unlock()
	if h == nil {
		return nil
	}
	select {
	case <-h.done:
	case <-ctx.Done():
		return fmt.Errorf("wait for the renewal of the lost holding %d of %q to stop: %w", h.token, name, context.Cause(ctx))
	}
	if _, err := h.kh.Release(ctx, nil); err != nil && !errors.Is(err, client.ErrLost) {
		return fmt.Errorf("release the lost holding %d of %q first: %w", h.token, name, err)
	}
	s.mu.Lock()
	if s.stale[name] == h {
		delete(s.stale, name)
	}
	s.mu.Unlock()
	return nil
}
