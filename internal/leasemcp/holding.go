package leasemcp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// holding is one lease the session holds: a Holding of the Keeper's
// (Keeper.Hold), which the Keeper keeps (renews it, or its session does)
// until it is released, lost or the Keeper closes. Its mutable fields are
// guarded by Server.mu.
type holding struct {
	kh    client.Holding // the Keeper's, from the one acquire
	name  string
	token int64
	ttl   time.Duration
	lease client.Lease // the acquire's answer
	proof string       // the service's signed proof of the holding, "" when it gave none

	// yieldTo is the preempting candidate that asks for the lease
	// (docs/contract.md §8), as the Keeper, the last checkpoint or read
	// answered; "" when none.
	yieldTo string

	stop     chan struct{} // closed to end the watch
	stopOnce sync.Once
	done     chan struct{} // closed when the watch has ended
}

// halt ends the watch of h (once) and waits for it to end.
func (h *holding) halt() {
	h.stopOnce.Do(func() { close(h.stop) })
	<-h.done
}

// deadlineReason is why a holding whose safe deadline passed is lost.
const deadlineReason = "nothing confirmed the holding before its safe deadline (the service is unreachable or too slow)"

// alive reports whether the holding may still be acted on at now (on the
// Keeper's clock), and why not: it has not ended and its safe deadline
// (Holding.Deadline) has not passed.
func (h *holding) alive(now time.Time) (bool, string) {
	select {
	case <-h.kh.Done():
		return false, endReason(h.kh, now)
	default:
	}
	if !now.Before(h.kh.Deadline()) {
		return false, deadlineReason
	}
	return true, ""
}

// endReason says in words why the Holding kh ended, at now.
func endReason(kh client.Holding, now time.Time) string {
	err := kh.Err()
	switch {
	case errors.Is(err, client.ErrKeeperClosed):
		return "the session is ending: its keeper closed"
	case !now.Before(kh.Deadline()):
		if err != nil {
			return deadlineReason + ": " + err.Error()
		}
		return deadlineReason
	case errors.Is(err, client.ErrLost):
		return "the service answered lease_lost (the holding expired, was revoked or was taken over): " + err.Error()
	case err == nil:
		return "the holding ended"
	}
	return "the background renewal failed: " + err.Error()
}

// adopt records the holding kh as held and watches it. It returns false
// when the session is ending; the holding is then released.
func (s *Server) adopt(kh client.Holding, ttl time.Duration) (*holding, bool) {
	l := kh.Lease()
	h := &holding{
		kh: kh, name: l.Name, token: l.FencingToken, ttl: ttl, lease: l, proof: proofOf(l),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	s.mu.Lock()
	closing := s.closing
	if !closing {
		if old := s.held[h.name]; old != nil {
			old.stopOnce.Do(func() { close(old.stop) })
		}
		s.held[h.name] = h
		delete(s.stale, h.name)
	}
	s.mu.Unlock()
	if closing {
		close(h.done) // never watched
		if err := s.release(h); err != nil {
			s.cfg.Logger.Warn("leasectl mcp: release failed", "lease", h.name, "err", err)
		}
		return nil, false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(h.done)
		s.watch(h)
	}()
	s.addHeldResource(h.name)
	s.cfg.Logger.Info("leasectl mcp: holding", "lease", h.name, "holder", s.cfg.Holder, "fencingToken", h.token)
	return h, true
}

// watch follows the holding h until it is lost or its watch is stopped:
// it reports the loss when the Keeper ends the holding or its safe
// deadline (on the Keeper's clock) passes first, and notes each yield
// request.
func (s *Server) watch(h *holding) {
	clock := s.cfg.Keeper.Clock()
	for {
		changed := h.kh.Changed()
		now := clock.Now()
		if ok, why := h.alive(now); !ok {
			s.lose(h, why)
			return
		}
		t := clock.NewTimer(h.kh.Deadline().Sub(now))
		select {
		case <-h.stop:
			t.Stop()
			return
		case <-h.kh.Done():
		case to := <-h.kh.YieldRequests():
			s.noteYield(h, to)
		case <-changed:
		case <-t.C():
		}
		t.Stop()
	}
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
// tool result, stops its watch and notifies the client. Server.mu is
// held.
func (s *Server) loseLocked(h *holding, reason string) {
	delete(s.held, h.name)
	s.stale[h.name] = h
	l := LostLease{Name: h.name, FencingToken: h.token, Reason: reason}
	s.lost = append(s.lost, l)
	h.stopOnce.Do(func() { close(h.stop) })
	s.cfg.Logger.Warn("leasectl mcp: lease lost", "lease", h.name, "fencingToken", h.token, "reason", reason)
	go s.notifyLost(l)
}

// sweep takes every holding that ended or is past its safe deadline out
// of the held leases.
func (s *Server) sweep() {
	now := s.cfg.Keeper.Clock().Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.held {
		if ok, why := h.alive(now); !ok {
			s.loseLocked(h, why)
		}
	}
}

// release stops the watch of h, which the caller has taken out of the
// held leases, and releases the holding. A holding that is already over
// (expired, taken by another since) is not an error: it is released
// either way.
func (s *Server) release(h *holding) error {
	h.halt()
	s.removeHeldResource(h.name)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ReleaseTimeout)
	defer cancel()
	if _, err := h.kh.Release(ctx, nil); err != nil && !over(err) {
		return fmt.Errorf("release %q (fencing token %d): %w", h.name, h.token, err)
	}
	s.cfg.Logger.Info("leasectl mcp: released", "lease", h.name, "fencingToken", h.token)
	return nil
}

// over reports whether a release's err says the holding is over anyway:
// lost, or gone with the session the service ended.
func over(err error) bool {
	return errors.Is(err, client.ErrLost) || errors.Is(err, client.ErrSessionClosed)
}

// forgetStale releases a lost holding of name that the service may still
// count as live, so that an acquire by the agent begins a new holding (a
// new token) instead of reviving the lost one. It first waits for the lost
// holding's watch to end, so that nothing of the old holding acts on the
// new one.
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
		return fmt.Errorf("wait for the watch of the lost holding %d of %q to end: %w", h.token, name, context.Cause(ctx))
	}
	if _, err := h.kh.Release(ctx, nil); err != nil && !over(err) {
		return fmt.Errorf("release the lost holding %d of %q first: %w", h.token, name, err)
	}
	s.mu.Lock()
	if s.stale[name] == h {
		delete(s.stale, name)
	}
	s.mu.Unlock()
	return nil
}
