package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Holding is one lease a Keeper holds, from its acquire until it is
// released, transferred or lost. Its deadline (Deadline) is the instant
// after which its owner must not act as the holder; Changed says when the
// deadline moves and Done when the holding ends. A Holding is safe for
// concurrent use.
type Holding struct {
	k     *Keeper
	name  string
	token int64
	held  *sessionHolding // through a session; nil with plain renewals
	ttl   time.Duration   // plain renewals: the acquire's TTL

	mu       sync.Mutex
	lease    Lease
	sent     time.Time     // plain: the send time of the last confirmation
	changed  chan struct{} // plain: closed and replaced when sent moves
	done     chan struct{} // plain: closed when the holding ended
	doneErr  error
	doneOnce sync.Once
}

// Acquire takes the lease name for req.Holder (req.TTL defaults to the
// Keeper's) and returns the Holding. When ctx ends while the acquire is in
// flight, whatever it may have taken is released (Session.Acquire, or
// the answer awaited up to ReleaseTimeout with plain renewals) and ctx's
// error returned.
func (k *Keeper) Acquire(ctx context.Context, name string, req AcquireRequest) (*Holding, error) {
	if req.TTL == 0 {
		req.TTL = k.cfg.TTL
	}
	sent := k.cfg.Clock.Now()
	var l Lease
	var err error
	if k.sess != nil {
		l, err = k.sess.Acquire(ctx, name, req)
	} else {
		l, err = k.acquirePlain(ctx, name, req)
	}
	if err != nil {
		return nil, err
	}
	h := &Holding{k: k, name: name, token: l.FencingToken, ttl: req.TTL, lease: l, sent: sent,
		changed: make(chan struct{}), done: make(chan struct{})}
	if k.sess != nil {
		if h.held = k.sess.holding(name, l.FencingToken); h.held == nil {
			h.end(fmt.Errorf("%w: the session holds it no more", ErrLost))
		}
	}
	return h, nil
}

// Name returns the lease's name.
func (h *Holding) Name() string { return h.name }

// Token returns the holding's fencing token.
func (h *Holding) Token() int64 { return h.token }

// Lease returns the lease as the last answer about this holding showed it
// (its Proof is the acquire's).
func (h *Holding) Lease() Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease
}

// Deadline returns the holding's safe deadline on the Keeper's clock:
// through a session, the session's (zero before its first acknowledged
// heartbeat), and until an ack arrives after the holding's answer no later
// than the acquire's send time + the session lease TTL × (1 −
// DriftMargin) (docs/contract.md §14, A4); with plain renewals, the send time of the last acquire or
// renew that succeeded + the acquire's TTL × (1 − DriftMargin), the one place this
// package writes that formula (docs/contract.md §2).
func (h *Holding) Deadline() time.Time {
	if s := h.k.sess; s != nil {
		if h.held == nil {
			return s.Deadline()
		}
		return s.holdingDeadline(h.held)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent.Add(SafeSpan(h.ttl, h.k.cfg.DriftMargin))
}

// Changed returns a channel closed the next time Deadline moves.
func (h *Holding) Changed() <-chan struct{} {
	if s := h.k.sess; s != nil {
		return s.deadlineChanged()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

// Done returns a channel closed when the holding ends: lost (the service
// ended it, as a renew's answer or the session says), released or
// transferred.
func (h *Holding) Done() <-chan struct{} {
	if h.held != nil {
		return h.held.lost
	}
	return h.done
}

// Err says why the holding ended, once Done is closed: an error that
// matches ErrLost when the service ended it.
func (h *Holding) Err() error {
	select {
	case <-h.Done():
	default:
		return nil
	}
	if h.held != nil {
		return h.held.lostErr
	}
	return h.doneErr
}

// YieldRequests returns a channel on which a preempting candidate's request
// to step down arrives unasked (through a session); nil when such requests
// come only with renewals' answers (Lease.YieldRequested).
func (h *Holding) YieldRequests() <-chan string {
	if h.held != nil {
		return h.held.yield
	}
	return nil
}

// RenewDue reports whether the holding's owner must renew it now: with
// plain renewals always; through a session (whose service renews its
// leases itself) only to write a checkpoint or metadata.
func (h *Holding) RenewDue(write bool) bool { return write || h.k.sess == nil }

// end ends a plain holding with err (nil: released or transferred).
func (h *Holding) end(err error) {
	h.doneOnce.Do(func() {
		h.doneErr = err
		close(h.done)
	})
}

// confirm records a renew sent at sent that succeeded with l.
func (h *Holding) confirm(sent time.Time, l Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l.Proof = h.lease.Proof     // a renew's answer carries none: the holding's is the acquire's
	if len(l.Checkpoint) == 0 { // keep what the holding inherited
		l.Checkpoint, l.CheckpointToken = h.lease.Checkpoint, h.lease.CheckpointToken
	}
	h.lease = l
	if h.k.sess == nil && sent.After(h.sent) {
		h.sent = sent
		close(h.changed)
		h.changed = make(chan struct{})
	}
}

// Renew renews the holding (req.Holder and req.FencingToken default to
// the holding's), writing req.Checkpoint or req.Metadata if set. With
// plain renewals it moves the deadline; through a session it writes what
// req carries (the session's heartbeats move the deadline). A renew
// answered lease_lost ends the holding.
func (h *Holding) Renew(ctx context.Context, req RenewRequest) (Lease, error) {
	return h.renew(ctx, req, callOpts{})
}

// renew is Renew with o for plain renewals' request.
func (h *Holding) renew(ctx context.Context, req RenewRequest, o callOpts) (Lease, error) {
	req.Holder, req.FencingToken = h.who(req.Holder, req.FencingToken)
	sent := h.k.cfg.Clock.Now()
	var l Lease
	var err error
	if s := h.k.sess; s != nil {
		l, err = s.Renew(ctx, h.name, req)
	} else {
		l, err = h.k.c.renew(ctx, h.name, req, o)
	}
	switch {
	case err == nil:
		h.confirm(sent, l)
		return h.Lease(), nil
	case isLost(err) && h.held == nil:
		h.end(err)
	}
	return Lease{}, err
}

// who defaults a request's holder and fencing token to the holding's.
func (h *Holding) who(holder string, token int64) (string, int64) {
	if holder == "" {
		holder = h.Lease().Holder
	}
	if token == 0 {
		token = h.token
	}
	return holder, token
}

// Release ends the holding now, writing checkpoint if not nil. The
// holding ends whatever the answer, except a failure that leaves it
// unknown (a Session keeps such a release going through its resume).
func (h *Holding) Release(ctx context.Context, checkpoint []byte) (Lease, error) {
	req := ReleaseRequest{Checkpoint: checkpoint}
	req.Holder, req.FencingToken = h.who("", 0)
	var l Lease
	var err error
	if s := h.k.sess; s != nil {
		l, err = s.ReleaseWith(ctx, h.name, req)
	} else {
		l, err = h.k.c.release(ctx, h.name, req, callOpts{})
	}
	if err == nil || isLost(err) {
		h.end(err)
	}
	return l, err
}

// Transfer hands the holding over to req.To (req.Holder and
// req.FencingToken default to the holding's), writing req.Checkpoint if
// set; on success the holding ends.
func (h *Holding) Transfer(ctx context.Context, req TransferRequest) (Lease, error) {
	req.Holder, req.FencingToken = h.who(req.Holder, req.FencingToken)
	var l Lease
	var err error
	if s := h.k.sess; s != nil {
		l, err = s.Transfer(ctx, h.name, req)
	} else {
		l, err = h.k.c.transfer(ctx, h.name, req, callOpts{})
	}
	if err == nil || isLost(err) {
		h.end(err)
	}
	return l, err
}

// Fresh makes sure the holding's deadline leaves more than room after an
// acquire that may have waited: with plain renewals, an acquire answered
// more than TTL/6 after it was sent is renewed once (a failure other than
// a loss leaves the acquire's deadline); through a session, it waits for
// an acknowledged heartbeat. It returns false when the holding was lost
// meanwhile, or ctx ended (the holding is then released).
func (h *Holding) Fresh(ctx context.Context, room time.Duration) bool {
	clock := h.k.cfg.Clock
	if h.k.sess == nil {
		h.mu.Lock()
		stale := clock.Now().Sub(h.sent) > h.ttl/6
		h.mu.Unlock()
		if stale {
			_, err := h.renew(ctx, RenewRequest{}, callOpts{attempts: 1})
			return !isLost(err)
		}
		return true
	}
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

// unconfirmed is why a holding's deadline passed with nothing to move it.
func (h *Holding) unconfirmed() error {
	if h.k.sess != nil {
		return errors.New("no heartbeat of the session was acknowledged in time")
	}
	return errors.New("no answer to the renew in time")
}

// Hold acquires the lease name as Acquire does and keeps it until it is
// released, transferred or lost: through a session the service renews it;
// with plain renewals a goroutine renews it every TTL/3 (retrying failures
// with RetryBackoff), moving its deadline, and ends it when a renew
// answers lease_lost, is refused for good, or the deadline passes first.
// Hold is for owners that do not renew by themselves (tools, workers); an
// Elector's term renews its holding with its checkpoints.
func (k *Keeper) Hold(ctx context.Context, name string, req AcquireRequest) (*Holding, error) {
	h, err := k.Acquire(ctx, name, req)
	if err != nil {
		return nil, err
	}
	if h.held == nil {
		go h.keep()
	}
	return h, nil
}

// keep renews a plain holding until it ends (Hold).
func (h *Holding) keep() {
	clock := h.k.cfg.Clock
	every := max(h.ttl/3, time.Millisecond)
	wait, failures := every, 0
	for {
		t := clock.NewTimer(min(wait, max(0, h.Deadline().Sub(clock.Now()))))
		select {
		case <-h.done:
			t.Stop()
			return
		case <-t.C():
		}
		if !clock.Now().Before(h.Deadline()) {
			h.end(fmt.Errorf("%w: no renew succeeded before the safe deadline", ErrLost))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		_, err := h.renew(ctx, RenewRequest{}, callOpts{attempts: 1})
		cancel()
		switch {
		case err == nil:
			wait, failures = every, 0
		case isLost(err):
			return // renew ended the holding
		case permanent(err):
			h.end(err)
			return
		default:
			h.k.cfg.Logger.Warn("leasesvc keeper: renew failed", "lease", h.name, "fencingToken", h.token, "err", err)
			wait = retryDelay(h.k.cfg.RetryBackoff, err, failures)
			failures++
		}
	}
}

// TTL returns the lease duration the holding's renewals ask for; 0
// through a session, whose leases the service holds at its own session
// TTL and ends within the window of the session's end.
func (h *Holding) TTL() time.Duration {
	if h.held != nil {
		return 0
	}
	return h.ttl
}
