package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// plainHolder hands out a Keeper's holdings of plain renewals: acquired
// over REST and renewed by the Keeper every RenewInterval (rule L4).
type plainHolder struct{ k *Keeper }

// acquire sends one plain acquire and starts keeping its holding.
func (p plainHolder) acquire(ctx context.Context, name string, req AcquireRequest) (Holding, error) {
	k := p.k
	sent := k.cfg.Clock.Now()
	l, err := k.acquirePlain(ctx, name, req)
	if err != nil {
		return nil, err
	}
	h := &plainHolding{holdingBase: holdingBase{k: k, name: name, token: l.FencingToken, lease: l},
		ttl: req.TTL, sent: sent, changed: make(chan struct{}), done: make(chan struct{}), yield: make(chan string, 1)}
	go h.keep()
	return h, nil
}

// close has nothing to let go of: the Keeper released the holdings.
func (plainHolder) close() {}

// describe says "with plain renewals (ttl 30s)", and why.
func (plainHolder) describe(m KeeperMode, reason bool) string {
	s := fmt.Sprintf("with plain renewals (ttl %v)", m.Span)
	if reason {
		s += m.Reason.why(m.Cause)
	}
	return s
}

// plainHolding is a Holding of plain renewals.
type plainHolding struct {
	holdingBase
	ttl time.Duration // the acquire's TTL

	// Guarded by holdingBase.mu.
	sent    time.Time     // the send time of the last confirmation
	changed chan struct{} // closed and replaced when sent moves
	lastErr error         // the last renew that failed since one succeeded

	done     chan struct{} // closed when the holding ended
	doneErr  error
	doneOnce sync.Once
	yield    chan string // a renew's answer asked it to yield
}

// TTL returns the lease duration the holding's renewals ask for.
func (h *plainHolding) TTL() time.Duration { return h.ttl }

// Deadline returns the send time of the last acquire or renew that
// succeeded + the TTL × (1 − DriftMargin), the one place this package
// writes that formula for plain renewals (docs/contract.md §2).
func (h *plainHolding) Deadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent.Add(SafeSpan(h.ttl, h.k.cfg.DriftMargin))
}

// Changed returns a channel closed the next time Deadline moves.
func (h *plainHolding) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

// Done returns a channel closed when the holding ends.
func (h *plainHolding) Done() <-chan struct{} { return h.done }

// Err says why the holding ended, once Done is closed.
func (h *plainHolding) Err() error {
	select {
	case <-h.done:
		return h.doneErr
	default:
		return nil
	}
}

// YieldRequests delivers a renewal's answer that a preempting candidate
// asks for the lease.
func (h *plainHolding) YieldRequests() <-chan string { return h.yield }

// end ends the holding with err (nil: released or transferred).
func (h *plainHolding) end(err error) {
	h.doneOnce.Do(func() {
		h.doneErr = err
		close(h.done)
	})
}

// confirm records a renew sent at sent that succeeded with l.
func (h *plainHolding) confirm(sent time.Time, l Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recordLocked(l)
	h.lastErr = nil
	if sent.After(h.sent) {
		h.sent = sent
		close(h.changed)
		h.changed = make(chan struct{})
	}
	if l.YieldRequested {
		select {
		case h.yield <- l.YieldTo:
		default:
		}
	}
}

// Renew renews the holding, moving its deadline.
func (h *plainHolding) Renew(ctx context.Context, req RenewRequest) (Lease, error) {
	return h.renewWith(ctx, req, callOpts{})
}

func (h *plainHolding) renewWith(ctx context.Context, req RenewRequest, o callOpts) (Lease, error) {
	req.Holder, req.FencingToken = h.who(req.Holder, req.FencingToken)
	sent := h.k.cfg.Clock.Now()
	l, err := h.k.c.renew(ctx, h.name, req, o)
	switch {
	case err == nil:
		h.confirm(sent, l)
		return h.Lease(), nil
	case isLost(err):
		h.end(err)
	}
	return Lease{}, err
}

// Release ends the holding now over REST.
func (h *plainHolding) Release(ctx context.Context, checkpoint []byte) (Lease, error) {
	req := ReleaseRequest{Checkpoint: checkpoint}
	req.Holder, req.FencingToken = h.who("", 0)
	l, err := h.k.c.release(ctx, h.name, req, callOpts{})
	if err == nil || isLost(err) {
		h.end(err)
	}
	return l, err
}

// Transfer hands the holding over to req.To over REST.
func (h *plainHolding) Transfer(ctx context.Context, req TransferRequest) (Lease, error) {
	req.Holder, req.FencingToken = h.who(req.Holder, req.FencingToken)
	l, err := h.k.c.transfer(ctx, h.name, req, callOpts{})
	if err == nil || isLost(err) {
		h.end(err)
	}
	return l, err
}

// Fresh renews once an acquire answered more than TTL/6 after its send.
func (h *plainHolding) Fresh(ctx context.Context, _ time.Duration) bool {
	h.mu.Lock()
	stale := h.k.cfg.Clock.Now().Sub(h.sent) > h.ttl/6
	h.mu.Unlock()
	if stale {
		_, err := h.renewWith(ctx, RenewRequest{}, callOpts{attempts: 1})
		return !isLost(err)
	}
	return true
}

// unconfirmed is why the deadline passed: the last renew's failure.
func (h *plainHolding) unconfirmed() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastErr != nil {
		return h.lastErr
	}
	return errors.New("no answer to the renew in time")
}

// every is how often the Keeper renews the holding: RenewInterval, or a
// third of a TTL other than the Keeper's.
func (h *plainHolding) every() time.Duration {
	if h.ttl != h.k.cfg.TTL {
		return max(h.ttl/3, time.Millisecond)
	}
	return h.k.cfg.RenewInterval
}

// keep renews the holding until it ends (rule L4): every RenewInterval
// (less up to RenewJitter of it) after its last confirmation, retrying
// failures with RetryBackoff; it ends the holding when a renew answers
// lease_lost or is refused for good, or the deadline passes first, and
// stops when the Keeper closes.
func (h *plainHolding) keep() {
	k := h.k
	clock := k.cfg.Clock
	every := h.every()
	jittered := func() time.Duration {
		return every - time.Duration(rand.Float64()*k.cfg.RenewJitter*float64(every))
	}
	h.mu.Lock()
	next := h.sent.Add(jittered())
	h.mu.Unlock()
	failures := 0
	for {
		changed := h.Changed()
		deadline := h.Deadline()
		at := next
		if deadline.Before(at) {
			at = deadline
		}
		t := clock.NewTimer(max(0, at.Sub(clock.Now())))
		select {
		case <-h.done:
			t.Stop()
			return
		case <-k.closing: // Close releases and ends it
			t.Stop()
			return
		case <-changed: // renewed (by its owner, or below): from that send on
			t.Stop()
			h.mu.Lock()
			next = h.sent.Add(jittered())
			h.mu.Unlock()
			failures = 0
			continue
		case <-t.C():
		}
		if !clock.Now().Before(h.Deadline()) {
			// Lost, and the safe deadline's: an Elector that sees this end
			// before its own stop timer (a process paused past both) still
			// says why.
			h.end(fmt.Errorf("%w: %w: %w", ErrLost, ErrSafeDeadline, h.unconfirmed()))
			return
		}
		if clock.Now().Before(next) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(time.Millisecond, min(k.c.cfg.RequestTimeout, every)))
		_, err := h.renewWith(ctx, RenewRequest{}, callOpts{attempts: 1})
		cancel()
		switch {
		case err == nil:
			h.mu.Lock()
			next = h.sent.Add(jittered())
			h.mu.Unlock()
			failures = 0
		case isLost(err):
			return // renew ended the holding
		case permanent(err):
			h.end(err)
			return
		default:
			h.mu.Lock()
			h.lastErr = err
			h.mu.Unlock()
			d := retryDelay(k.cfg.RetryBackoff, err, failures)
			failures++
			k.retrying(KeeperRetry{Op: RetryRenew, Lease: h.name, Token: h.token, Attempt: failures, Delay: d, Err: err})
			next = clock.Now().Add(d)
		}
	}
}

// acquirePlain sends one plain acquire. When ctx ends while it is in
// flight, it gives up what the acquire may have taken, so followers need
// not wait for a holding nobody renews to run out, and returns ctx's error.
//
// An acquire that does not wait is not cancelled then: a request cancelled
// in flight may still be decided by the service after anything read to
// find out, so the answer is awaited (up to ReleaseTimeout) and the holding
// it gives released by its token. A waiting acquire is cancelled, so that
// the service stops waiting, and what the lease shows afterwards is
// released if it is this holder's (abandon).
func (k *Keeper) acquirePlain(ctx context.Context, name string, req AcquireRequest) (Lease, error) {
	if req.Wait > 0 {
		l, err := k.c.acquire(ctx, name, req, callOpts{attempts: 1})
		if err != nil && ctx.Err() != nil {
			k.abandon(name, req.Holder)
		}
		return l, err
	}
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	type answer struct {
		l   Lease
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		l, err := k.c.acquire(actx, name, req, callOpts{attempts: 1})
		ch <- answer{l, err}
	}()
	select {
	case a := <-ch:
		return a.l, a.err
	case <-ctx.Done():
	}
	stop := time.AfterFunc(k.cfg.ReleaseTimeout, cancel) // the process's clock, as release's timeout
	defer stop.Stop()
	if a := <-ch; a.err == nil {
		rctx, rcancel := context.WithTimeout(context.Background(), k.cfg.ReleaseTimeout)
		defer rcancel()
		_, _ = k.c.release(rctx, name, ReleaseRequest{Holder: req.Holder, FencingToken: a.l.FencingToken}, callOpts{attempts: 2})
	} else {
		k.abandon(name, req.Holder) // no answer: what the lease shows
	}
	return Lease{}, ctx.Err()
}

// abandon releases a holding of holder that an acquire cancelled in flight
// may have obtained without the Keeper hearing of it.
func (k *Keeper) abandon(name, holder string) {
	ctx, cancel := context.WithTimeout(context.Background(), k.cfg.ReleaseTimeout)
	defer cancel()
	l, err := k.c.Get(ctx, name)
	if err == nil && l.Held && l.Holder == holder {
		_, _ = k.c.release(ctx, name, ReleaseRequest{Holder: holder, FencingToken: l.FencingToken}, callOpts{attempts: 2})
	}
}
