package client

import (
	"context"
	"fmt"
)

// stepDown is why a leader stops leading while its term could go on.
type stepDown int

const (
	// notStepping: it leads until its term ends.
	notStepping stepDown = iota
	// stepGraceful: Run's ctx is done; the holding is released.
	stepGraceful
	// stepYielded: it steps down for a preempting candidate
	// (OnYieldRequested); the holding is released.
	stepYielded
	// stepResigned: OnStartedLeading returned while leading; the holding
	// is released.
	stepResigned
)

// lead runs one term of leadership for the holding h: it starts
// OnStartedLeading, follows the holding's deadline (which its Keeper
// moves), writes checkpoints, and decides when to stop leading (a graceful stop, a step-down, a
// resignation). It returns true when Run should return (a graceful stop or
// a resignation) and false to campaign again.
func (e *Elector) lead(ctx context.Context, h Holding) bool {
	if !e.k.cfg.Clock.Now().Before(StopAt(h.Deadline(), e.cfg.CancelBefore)) {
		return false // too late to lead on this holding
	}
	l := h.Lease()
	vctx := context.WithValue(ctx, tokenKey{}, l.FencingToken)
	vctx = context.WithValue(vctx, proofKey{}, l.Proof)
	vctx = context.WithValue(vctx, checkpointKey{}, inherited{checkpoint: l.Checkpoint, token: l.CheckpointToken})
	termCtx, cancelTerm := context.WithCancelCause(vctx)
	defer cancelTerm(context.Canceled)
	var t *term
	t = newTerm(ctx, e.termConfig(), h, func(cause, over error) {
		e.mu.Lock()
		e.leading = false
		e.mu.Unlock()
		if over != nil {
			t.setEnded(over)
		}
		cancelTerm(cause)
	})
	e.mu.Lock()
	e.leading, e.token, e.term = true, l.FencingToken, t
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.term = nil
		e.mu.Unlock()
		close(t.over)
	}()
	t.log("leasesvc elector: leading", false)

	if e.cfg.Callbacks.OnSafeDeadline != nil {
		t.reported = h.Deadline()
		e.cfg.Callbacks.OnSafeDeadline(t.reported)
	}
	cbDone := make(chan struct{})
	go func() {
		defer close(cbDone)
		e.cfg.Callbacks.OnStartedLeading(termCtx)
	}()
	t.arm()
	defer t.close()

	why, cbReturned := notStepping, false
	parentDone := ctx.Done()
	// stopping begins a graceful stop: Run's ctx is done.
	stopping := func() {
		parentDone = nil
		why = stepGraceful
		t.end(context.Cause(ctx), nil)
		e.cfg.Logger.Info("leasesvc elector: stopping", "lease", e.name, "holder", e.cfg.Holder)
	}
	// A yield request, asked once per term (OnYieldRequested).
	yieldAsked := false
	yieldDone := make(chan string, 1)
	askYield := func(to string) {
		if yieldAsked || why == stepGraceful || termCtx.Err() != nil {
			return
		}
		yieldAsked = true
		t.log("leasesvc elector: asked to yield", false, "yieldTo", to)
		go func() {
			if e.cfg.Callbacks.OnYieldRequested != nil {
				e.cfg.Callbacks.OnYieldRequested(termCtx, to)
			}
			yieldDone <- to
		}()
	}

	for {
		if cbReturned && !t.busy() {
			t.finish(why != notStepping)
			t.log("leasesvc elector: stopped leading", false)
			if e.cfg.Callbacks.OnStoppedLeading != nil {
				e.cfg.Callbacks.OnStoppedLeading()
			}
			// A transfer that finished meanwhile is no resignation.
			return why == stepGraceful || (why == stepResigned && t.phase != termGone)
		}
		select {
		case <-parentDone:
			stopping()

		case <-cbDone:
			cbDone = nil
			cbReturned = true
			if parentDone != nil && ctx.Err() != nil {
				// Run's ctx ended and the callback returned before this
				// loop saw it (a callback that cancels it itself): a
				// graceful stop all the same, so the lease is released.
				stopping()
			}
			// Returning while still leading resigns.
			if why == notStepping && termCtx.Err() == nil {
				why = stepResigned
			}

		case r := <-t.reqs:
			t.onRequest(r)

		case err := <-t.transferDone:
			t.onTransferDone(err)

		case to := <-yieldDone:
			if t.phase == termRenewing && !t.busy() && why != stepGraceful && termCtx.Err() == nil {
				why = stepYielded
				t.log("leasesvc elector: stepping down", false, "yieldTo", to)
				t.end(fmt.Errorf("%w %q", ErrYielded, to), nil)
			}

		case <-t.renewT.C():
			t.onRenewTimer()

		case <-t.wake:
			t.onWake()

		case r := <-t.results:
			rl, renewed := t.onRenewResult(r)
			if renewed && rl.YieldRequested {
				askYield(rl.YieldTo)
			}

		case to := <-t.yieldCh:
			askYield(to)

		case <-t.changed:
			t.onDeadlineMoved()

		case <-t.done:
			t.onLost()

		case <-t.stop.C():
			t.onDeadline()
		}
	}
}

// termConfig is what a term of this Elector needs of its configuration
// and its Keeper's.
func (e *Elector) termConfig() termConfig {
	return termConfig{name: e.name, holder: e.cfg.Holder, clock: e.k.cfg.Clock, logger: e.cfg.Logger,
		cancelBefore: e.cfg.CancelBefore, renewInterval: e.k.cfg.RenewInterval, attemptTimeout: e.attemptTimeout(),
		releaseTimeout: e.k.cfg.ReleaseTimeout, jittered: e.jittered, retryDelay: e.retryDelay, onSafeDeadline: e.cfg.Callbacks.OnSafeDeadline}
}
