package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// ErrSafeDeadline is the cause of a leading ctx cancelled because no renew
// succeeded before the safe deadline (docs/contract.md §2). It wraps the error of the
// last failed renew.
var ErrSafeDeadline = errors.New("leasesvc: safe deadline reached without a successful renew")

// ErrYielded is the cause of a leading ctx cancelled because the Elector
// steps down for a preempting candidate (ElectorConfig.OnYieldRequested,
// docs/contract.md §8).
var ErrYielded = errors.New("leasesvc: stepped down for a preempting candidate")

// ErrTransferred is the cause of a leading ctx cancelled because
// Elector.Transfer handed the holding over to a named successor.
var ErrTransferred = errors.New("leasesvc: leadership transferred")

// ErrNotLeading is returned by Elector.Checkpoint, SetCheckpoint and
// Transfer when there is no term of leadership they could act on.
var ErrNotLeading = errors.New("leasesvc: elector is not leading")

// Elector campaigns for one lease and keeps it while this process leads,
// like client-go's leaderelection.LeaderElector, on the leasesvc API.
//
// Run blocks, campaigning until its ctx is cancelled: it acquires the
// lease, waiting on the service (waitMs) while another holds it; once
// leader it calls OnStartedLeading, renews every RenewInterval (with
// jitter), and ends the term — cancelling the leading ctx — at once when a
// renew answers lease_lost, and at the safe deadline when renewals fail for
// any reason (timeouts, 5xx, an unreachable service). After a lost term it
// campaigns again. When Run's ctx is cancelled it cancels the leading ctx,
// waits for OnStartedLeading to return while it keeps renewing, releases the
// lease so a follower takes over at once, calls OnStoppedLeading and
// returns nil.
//
// An operator's revocation (Client.Revoke) ends the term like any
// lease_lost: the next renew is refused and the leading ctx is cancelled at
// that answer, with a cause that matches ErrLost. The Elector learns of it
// only from that renew, so the leader may act for up to RenewInterval
// after the revocation, within the holding's fencing token (a downstream
// system that has seen token + 1 refuses it). The Elector then campaigns
// again like after any lost term, and may win the lease back with token +
// 1: a revocation ends a holding, it does not bar a holder.
//
// # Succession
//
// The Elector takes part in the succession of docs/contract.md §8.
// ElectorConfig.Priority ranks it among the candidates waiting for the
// lease (with Priority > 0 or Preempt its waiting acquires register it, so
// the lease is reserved for the best candidate when a holding ends), and
// ElectorConfig.Preempt makes it ask a leader of a lower priority to step
// down. A leader asked to step down calls ElectorConfig.OnYieldRequested,
// then ends its term and releases the lease (the leading ctx's cause
// matches ErrYielded) and campaigns again as a follower. A leader records
// its progress with Checkpoint (written at once) or SetCheckpoint (written
// with the next renew, or the release); the next leader, also after a
// crash, finds the last one written in its leading ctx
// (CheckpointFromContext). Transfer hands the lease to a named successor.
//
// # Guarantees and limits
//
// The leading ctx is cancelled no later than (local monotonic time when the
// last successful acquire or renew was sent) + TTL × (1 − DriftMargin) −
// CancelBefore. The service decided that holding's expiry after that send,
// so no other holder can start before the deadline, provided the local
// clock and the backend's clock run at rates within DriftMargin of each
// other and this process is not paused. A process that is paused (GC,
// swap, a suspended VM) can still act after its deadline: that is why every
// write downstream must carry the fencing token (TokenFromContext), best as
// the holding's signed proof (ProofFromContext), and downstream systems
// must refuse tokens lower than the highest they have seen. The callbacks
// run only as long as they honour ctx: the Elector cannot stop code that
// ignores it.
type Elector struct {
	c    *Client
	name string
	cfg  ElectorConfig

	running atomic.Bool

	mu           sync.Mutex
	leading      bool
	token        int64 // of the current term, while leading
	term         *term // the current term, from its start until lead returns
	leaderHolder string
	leaderToken  int64

	// keeper holds the lease for Run: ElectorConfig.Keeper, or one Run
	// builds from the config. Set by Run before it campaigns.
	keeper *Keeper
	// cancelBefore is ElectorConfig.CancelBefore as given (0: the default,
	// which a session's window may lower) and plainCancelBefore the value
	// with plain renewals.
	cancelBefore, plainCancelBefore time.Duration
	// logged: ElectorConfig.Logger was given (else the mode line goes to
	// stderr, sayMode).
	logged bool
}

// NewElector returns an Elector for the lease name, calling the service
// through c. It checks cfg (see ElectorConfig) and does not modify it.
func NewElector(c *Client, name string, cfg ElectorConfig) (*Elector, error) {
	if c == nil {
		return nil, errors.New("client.NewElector: Client is nil")
	}
	if !ValidName(name) {
		return nil, fmt.Errorf("client.NewElector: lease name %q must be 1–128 characters of [A-Za-z0-9._-] starting with a letter or digit", name)
	}
	given, logged := cfg.CancelBefore, cfg.Logger != nil
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("client.NewElector: %w", err)
	}
	return &Elector{c: c, name: name, cfg: cfg, logged: logged,
		cancelBefore: given, plainCancelBefore: cfg.CancelBefore}, nil
}

// Holder returns this Elector's identity.
func (e *Elector) Holder() string { return e.cfg.Holder }

// IsLeader reports whether this Elector leads now: its term has begun and
// its leading ctx is not cancelled.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading
}

// Token returns the fencing token of this Elector's current term and true
// while it leads; 0 and false otherwise. Pass the token with every write
// downstream.
func (e *Elector) Token() (int64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.token, e.leading
}

// Leader returns the holder and fencing token last seen leading, this
// Elector's own included; empty before any was seen.
func (e *Elector) Leader() (holder string, token int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leaderHolder, e.leaderToken
}

type tokenKey struct{}

// TokenFromContext returns the fencing token of the term whose leading ctx
// (the one given to OnStartedLeading) ctx is or derives from.
func TokenFromContext(ctx context.Context) (int64, bool) {
	t, ok := ctx.Value(tokenKey{}).(int64)
	return t, ok
}

type proofKey struct{}

// ProofFromContext returns the fencing proof (docs/contract.md §17) of the
// term whose leading ctx (the one given to OnStartedLeading) ctx is or
// derives from: the proof the acquire that began the holding answered.
// Pass it, never the bare token, with every write downstream (as the
// Leasesvc-Fence header to an HTTP sink, see package fence). It is false
// outside a leading ctx, and when the service signs no proofs.
func ProofFromContext(ctx context.Context) (Proof, bool) {
	p, ok := ctx.Value(proofKey{}).(Proof)
	return p, ok && p != ""
}

// Run campaigns and leads until ctx is cancelled, as the type's doc says,
// and then returns nil. It returns an error at once when the service
// refuses the Elector's requests for good (ErrInvalid, ErrDenied: a TTL out
// of the service's bounds, credentials refused, for instance) and when Run
// is already running. A token source that fails (ErrCredentials) is
// retried like an unreachable service.
func (e *Elector) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("client: Elector.Run: already running")
	}
	defer e.running.Store(false)
	k, done, err := e.keep(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("client: elector %q: %w", e.name, err)
	}
	defer done()
	e.mu.Lock()
	e.keeper = k
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.keeper = nil
		e.mu.Unlock()
	}()
	for {
		h, sent, err := e.campaign(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("client: elector %q: %w", e.name, err)
		}
		if done := e.lead(ctx, h, sent); done {
			return nil
		}
	}
}

// observe records the holder seen leading and tells OnNewLeader.
func (e *Elector) observe(l Lease) {
	if !l.Held {
		return
	}
	e.mu.Lock()
	changed := l.Holder != e.leaderHolder
	e.leaderHolder, e.leaderToken = l.Holder, l.FencingToken
	e.mu.Unlock()
	if changed && e.cfg.OnNewLeader != nil {
		e.cfg.OnNewLeader(l.Holder)
	}
}

// permanent reports whether err cannot go away by retrying.
func permanent(err error) bool { return errors.Is(err, ErrInvalid) || errors.Is(err, ErrDenied) }

// sleep waits d on the Elector's clock; false when ctx ended first.
func (e *Elector) sleep(ctx context.Context, d time.Duration) bool {
	t := e.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// campaign acquires the lease through the Elector's Keeper, returning the
// holding and the local time at which its acquire was sent.
func (e *Elector) campaign(ctx context.Context) (*Holding, time.Time, error) {
	failures := 0
	// The first acquire, and the first after a failure, does not wait: the
	// answer says at once who leads (OnNewLeader, Leader). The next ones wait
	// on the service for that holding to end.
	wait := false
	for {
		if ctx.Err() != nil {
			return nil, time.Time{}, ctx.Err()
		}
		req := AcquireRequest{Holder: e.cfg.Holder, TTL: e.cfg.TTL, Metadata: e.cfg.Metadata,
			Priority: e.cfg.Priority, Candidate: e.candidate()}
		if wait {
			req.Wait = max(e.cfg.Wait, 0)
			req.Preempt = e.cfg.Preempt && req.Wait > 0
		}
		sent := e.cfg.Clock.Now()
		h, err := e.keeper.Acquire(ctx, e.name, req)
		var held *HeldError
		var reserved *ReservedError
		switch {
		case err == nil:
			e.observe(h.Lease())
			// An acquire that waited on the service began its holding well
			// after it was sent: lead on a deadline not mostly spent.
			if h.Fresh(ctx, e.cfg.CancelBefore) {
				return h, sent, nil
			}
			if ctx.Err() != nil {
				return nil, time.Time{}, ctx.Err()
			}
		case ctx.Err() != nil: // the Keeper gave up what the acquire may have taken
			return nil, time.Time{}, ctx.Err()
		case errors.As(err, &held):
			failures = 0
			e.observe(held.Lease)
			if e.cfg.Wait > 0 && (!wait || e.cfg.Clock.Now().Sub(sent) >= e.cfg.Wait/10) {
				wait = true
				continue // wait on the service now, or again
			}
			// No waiting (or the service answered early): poll.
			if !e.sleep(ctx, e.jittered(e.cfg.RenewInterval)) {
				return nil, time.Time{}, ctx.Err()
			}
		case errors.As(err, &reserved):
			// Free, but reserved for another for a few seconds: wait on the
			// service (it keeps waiting through the reservation), else poll.
			failures = 0
			if e.cfg.Wait > 0 && (!wait || e.cfg.Clock.Now().Sub(sent) >= e.cfg.Wait/10) {
				wait = true
				continue
			}
			if !e.sleep(ctx, e.jittered(min(e.cfg.RenewInterval, max(reserved.RetryAfter, time.Millisecond)))) {
				return nil, time.Time{}, ctx.Err()
			}
		case permanent(err) || errors.Is(err, ErrSessionClosed):
			return nil, time.Time{}, err
		default:
			wait = false
			e.cfg.Logger.Warn("leasesvc elector: acquire failed", "lease", e.name, "holder", e.cfg.Holder, "err", err)
			if !e.sleep(ctx, e.retryDelay(err, failures)) {
				return nil, time.Time{}, ctx.Err()
			}
			failures++
		}
	}
}

// candidate reports whether the Elector's acquires send its priority, so
// that its waiting acquires register it as a candidate.
func (e *Elector) candidate() bool { return e.cfg.Priority > 0 || e.cfg.Preempt }

// retryDelay is how long to wait before retrying after the failures-th
// failure in a row, ending in err: the backoff, or the Retry-After of a 429
// when that is longer, since the caller's own rate limit refuses anything
// sooner. (A 503's Retry-After is not waited for: a leader's safe deadline
// does not wait, and the backoff already spaces the retries.)
func (e *Elector) retryDelay(err error, failures int) time.Duration {
	return retryDelay(e.cfg.RetryBackoff, err, failures)
}

// jittered returns d less a random part of up to RenewJitter of it.
func (e *Elector) jittered(d time.Duration) time.Duration {
	return d - time.Duration(rand.Float64()*e.cfg.RenewJitter*float64(d))
}

// attemptTimeout bounds one renew attempt: a renew that hangs must not use
// up the time left for the next one.
func (e *Elector) attemptTimeout() time.Duration {
	return max(time.Millisecond, min(e.c.cfg.RequestTimeout, e.cfg.RenewInterval))
}

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

// lead runs one term of leadership for the holding h, acquired by a
// request sent at sent: it starts OnStartedLeading, lets the term renew,
// and decides when to stop leading (a graceful stop, a step-down, a
// resignation). It returns true when Run should return (a graceful stop or
// a resignation) and false to campaign again.
func (e *Elector) lead(ctx context.Context, h *Holding, sent time.Time) bool {
	if !e.cfg.Clock.Now().Before(h.Deadline().Add(-e.cfg.CancelBefore)) {
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

	if e.cfg.OnSafeDeadline != nil {
		t.reported = h.Deadline()
		e.cfg.OnSafeDeadline(t.reported)
	}
	cbDone := make(chan struct{})
	go func() {
		defer close(cbDone)
		e.cfg.OnStartedLeading(termCtx)
	}()
	t.arm(sent)
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
			if e.cfg.OnYieldRequested != nil {
				e.cfg.OnYieldRequested(termCtx, to)
			}
			yieldDone <- to
		}()
	}

	for {
		if cbReturned && !t.busy() {
			t.finish(why != notStepping)
			t.log("leasesvc elector: stopped leading", false)
			if e.cfg.OnStoppedLeading != nil {
				e.cfg.OnStoppedLeading()
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

// termConfig is what a term of this Elector needs of its configuration.
func (e *Elector) termConfig() termConfig {
	return termConfig{name: e.name, holder: e.cfg.Holder, clock: e.cfg.Clock, logger: e.cfg.Logger,
		cancelBefore: e.cfg.CancelBefore, renewInterval: e.cfg.RenewInterval, attemptTimeout: e.attemptTimeout(),
		releaseTimeout: e.cfg.ReleaseTimeout, jittered: e.jittered, retryDelay: e.retryDelay, onSafeDeadline: e.cfg.OnSafeDeadline}
}
