package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// sessionHolder hands out a Keeper's holdings through its session. A
// session the Keeper opened itself (or the Client's shared one) that the
// service ended is replaced by a new one of the same window at the next
// acquire (rule L2); a Session given in KeeperConfig is not.
type sessionHolder struct {
	k    *Keeper
	own  bool          // the Keeper opened (or shares) the session: it reopens it
	scfg SessionConfig // how to open it again

	mu   sync.Mutex
	s    *Session
	done func() // lets go of s
}

// session returns the session to acquire through, first opening a new one
// when the service ended the Keeper's own.
func (sh *sessionHolder) session(ctx context.Context) (*Session, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.own || !errors.Is(sh.s.Err(), ErrSessionEnded) {
		return sh.s, nil
	}
	sh.done()
	sh.done = func() {}
	s, done, err := sh.k.open(ctx, sh.scfg)
	if err != nil {
		return nil, fmt.Errorf("client: Keeper: opening a new session for the one the service ended: %w", err)
	}
	sh.s, sh.done = s, done
	sh.k.cfg.Logger.Info("leasesvc keeper: opened a new session for the one the service ended", "window", s.Window())
	return s, nil
}

// acquire takes the lease through the session. The session's heartbeats
// keep the holding.
func (sh *sessionHolder) acquire(ctx context.Context, name string, req AcquireRequest) (Holding, error) {
	s, err := sh.session(ctx)
	if err != nil {
		return nil, err
	}
	l, err := s.Acquire(ctx, name, req)
	if err != nil {
		return nil, err
	}
	h := &sessionHeld{holdingBase: holdingBase{k: sh.k, name: name, token: l.FencingToken, lease: l}, s: s}
	if h.held = s.holding(name, l.FencingToken); h.held == nil {
		h.held = &sessionHolding{lost: make(chan struct{}), lostErr: fmt.Errorf("%w: the session holds it no more", ErrLost)}
		close(h.held.lost)
	}
	return h, nil
}

// close lets go of the session, if the Keeper opened or shares it.
func (sh *sessionHolder) close() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.done()
	sh.done = func() {}
}

// describe says "through a session (window 1s)".
func (*sessionHolder) describe(m KeeperMode, _ bool) string {
	return fmt.Sprintf("through a session (window %v)", m.Span)
}

// sessionHeld is a Holding through a session: the session's heartbeats
// keep it, its deadline is the session's, and every request about it goes
// on the session's socket.
type sessionHeld struct {
	holdingBase
	s    *Session
	held *sessionHolding // the session's record of it
}

// TTL is 0: the service holds session leases at its session lease TTL.
func (h *sessionHeld) TTL() time.Duration { return 0 }

// Deadline returns the session's deadline for the holding.
func (h *sessionHeld) Deadline() time.Time { return h.s.holdingDeadline(h.held) }

// Changed returns a channel closed the next time the session's deadline
// moves.
func (h *sessionHeld) Changed() <-chan struct{} { return h.s.deadlineChanged() }

// Done returns a channel closed when the session holds it no more.
func (h *sessionHeld) Done() <-chan struct{} { return h.held.lost }

// Err says why the holding ended, once Done is closed.
func (h *sessionHeld) Err() error {
	select {
	case <-h.held.lost:
		return h.held.lostErr
	default:
		return nil
	}
}

// YieldRequests delivers the session's yield pushes for the holding.
func (h *sessionHeld) YieldRequests() <-chan string { return h.held.yield }

// end forgets the holding in the session with err (no resume claims it
// again), unless it ended.
func (h *sessionHeld) end(err error) { h.s.dropHolding(h.name, h.token, err) }

// Renew writes req's checkpoint or metadata through the session.
func (h *sessionHeld) Renew(ctx context.Context, req RenewRequest) (Lease, error) {
	return h.renewWith(ctx, req, callOpts{})
}

func (h *sessionHeld) renewWith(ctx context.Context, req RenewRequest, _ callOpts) (Lease, error) {
	req.Holder, req.FencingToken = h.who(req.Holder, req.FencingToken)
	l, err := h.s.Renew(ctx, h.name, req)
	if err != nil {
		return Lease{}, err
	}
	h.mu.Lock()
	h.recordLocked(l)
	h.mu.Unlock()
	return h.Lease(), nil
}

// Release ends the holding through the session.
func (h *sessionHeld) Release(ctx context.Context, checkpoint []byte) (Lease, error) {
	req := ReleaseRequest{Checkpoint: checkpoint}
	req.Holder, req.FencingToken = h.who("", 0)
	return h.s.ReleaseWith(ctx, h.name, req)
}

// Transfer hands the holding over through the session.
func (h *sessionHeld) Transfer(ctx context.Context, req TransferRequest) (Lease, error) {
	req.Holder, req.FencingToken = h.who(req.Holder, req.FencingToken)
	return h.s.Transfer(ctx, h.name, req)
}

// Fresh waits for an acknowledged heartbeat that leaves more than room.
func (h *sessionHeld) Fresh(ctx context.Context, room time.Duration) bool {
	clock := h.k.cfg.Clock
	for {
		changed := h.Changed()
		if clock.Now().Before(h.Deadline().Add(-room)) {
			return true
		}
		select {
		case <-changed:
		case <-h.Done():
			return false
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), h.k.cfg.ReleaseTimeout)
			defer cancel()
			_, _ = h.Release(rctx, nil)
			return false
		}
	}
}

// unconfirmed is why the deadline passed: no heartbeat was acknowledged.
func (h *sessionHeld) unconfirmed() error {
	return errors.New("no heartbeat of the session was acknowledged in time")
}
