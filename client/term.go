package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// termPhase is where one term of leadership stands: what its holding is
// and what the term still does with it.
type termPhase int

const (
	// termRenewing: the holding is this Elector's; the term renews it and
	// moves its safe deadline with every successful renew.
	termRenewing termPhase = iota
	// termStopped: the term stopped renewing while the service may still
	// count the holding as this Elector's (the safe deadline passed, or a
	// renew was refused for good): a release may still end it early. (The
	// same four phases, by the same names, are the TypeScript and Python
	// SDKs' terms'.)
	termStopped
	// termGone: the service ended the holding (lost, revoked or
	// transferred): there is nothing left to release.
	termGone
	// termReleased: the Elector released the holding.
	termReleased
)

// String names the phase, for logs and test failures.
func (p termPhase) String() string {
	switch p {
	case termRenewing:
		return "renewing"
	case termStopped:
		return "stopped"
	case termGone:
		return "gone"
	case termReleased:
		return "released"
	}
	return fmt.Sprintf("termPhase(%d)", int(p))
}

// term is one holding of the lease from its acquire until the Elector's
// lead loop returns: it renews the holding, keeps its safe deadline (the
// send time of the last successful acquire or renew + TTL × (1 −
// DriftMargin)), writes checkpoints with its renewals, transfers and
// releases it. The campaign (Elector.campaign, Elector.lead) decides when
// to lead and when to stop; the term only says when the holding can no
// longer be led on, through end. Like etcd's concurrency.Session beside
// its Election, the deadline lives here and only here.
//
// The lead loop is the only goroutine that calls its methods, except
// where a comment says otherwise; the fields marked so are guarded by
// Elector.mu, as Checkpoint, SetCheckpoint and Transfer read them.
type term struct {
	e     *Elector
	token int64

	// Guarded by Elector.mu.
	pending json.RawMessage // the latest checkpoint not yet known to be stored
	gen     uint64          // counts SetCheckpoint calls, so a renew clears only what it sent
	// ended says why the holding can take no more checkpoints (lost, run
	// out, transferred, released); nil while it can.
	ended error

	reqs chan termReq  // to the lead loop
	over chan struct{} // closed when the lead loop has returned

	// Owned by the lead loop.
	phase termPhase
	// end cancels the leading ctx with cause; over, if not nil, also says
	// that the holding takes no more checkpoints.
	end          func(cause, over error)
	ctx          context.Context // Run's; renewals outlive its cancellation
	stopAt       time.Time       // the safe deadline less CancelBefore
	stop, renewT Timer
	results      chan renewResult
	cancelRenew  context.CancelFunc
	inFlight     bool
	failures     int
	lastErr      error
	// Checkpoint writes waiting for a renew: queued ones for the next,
	// covered ones for the one in flight.
	queued, covered []termReq
	transfer        *termReq // in flight (Elector.Transfer)
	transferDone    chan error

	// Through a session (nil: plain renewals): the session, the holding's
	// record in it, and the channels the lead loop selects on (nil when
	// done with, or without a session).
	sess        *Session
	held        *sessionHolding
	sessChanged <-chan struct{} // the session's deadline moved
	lostCh      <-chan struct{} // the service ended the holding
	yieldCh     <-chan string   // a preempting candidate asks for it
}

// termReq asks the lead loop to write the pending checkpoint now (to == "")
// or to transfer the holding to to.
type termReq struct {
	ctx        context.Context
	to         string
	checkpoint json.RawMessage
	done       chan error // buffered: the loop never blocks on it
}

// renewResult is the outcome of one renew attempt.
type renewResult struct {
	l    Lease
	err  error
	sent time.Time
	gen  uint64 // the checkpoint generation it carried
	cp   bool   // it carried a checkpoint
}

// newTerm returns the term of the holding with the fencing token token,
// renewing. Its timers are armed by arm.
func newTerm(ctx context.Context, e *Elector, token int64, end func(cause, over error)) *term {
	t := &term{e: e, token: token, reqs: make(chan termReq), over: make(chan struct{}),
		end: end, ctx: ctx, results: make(chan renewResult, 1), cancelRenew: func() {}, transferDone: make(chan error, 1)}
	if s := e.sess; s != nil {
		t.sess = s
		t.sessChanged = s.deadlineChanged()
		if t.held = s.holding(e.name, token); t.held != nil {
			t.lostCh, t.yieldCh = t.held.lost, t.held.yield
		} else {
			closed := make(chan struct{})
			close(closed)
			t.lostCh = closed // the session holds it no more: lost
		}
	}
	return t
}

// deadline returns the safe deadline of a holding confirmed by a request
// sent at sent; through a session, the session's deadline, whatever sent.
func (t *term) deadline(sent time.Time) time.Time {
	if t.sess != nil {
		return t.sess.Deadline()
	}
	return sent.Add(t.e.safe)
}

// arm starts the term's two timers for a holding confirmed by a request
// sent at sent: the safe deadline's and the first renewal's.
func (t *term) arm(sent time.Time) {
	clock := t.e.cfg.Clock
	t.stopAt = t.deadline(sent).Add(-t.e.cfg.CancelBefore)
	t.stop = clock.NewTimer(t.stopAt.Sub(clock.Now()))
	t.renewT = clock.NewTimer(sent.Add(t.e.jittered(t.e.cfg.RenewInterval)).Sub(clock.Now()))
}

// close stops the term's timers and any renew in flight.
func (t *term) close() {
	t.cancelRenew()
	if t.stop != nil {
		t.stop.Stop()
		t.renewT.Stop()
	}
}

// busy reports whether a transfer is in flight: no renew may be sent then.
func (t *term) busy() bool { return t.transfer != nil }

// log logs msg (a warning when warn) with the attributes every line about
// this term carries, then args.
func (t *term) log(msg string, warn bool, args ...any) {
	args = append([]any{"lease", t.e.name, "holder", t.e.cfg.Holder, "fencingToken", t.token}, args...)
	if warn {
		t.e.cfg.Logger.Warn(msg, args...)
		return
	}
	t.e.cfg.Logger.Info(msg, args...)
}

// reply answers every request of rs with err.
func reply(rs []termReq, err error) {
	for _, r := range rs {
		r.done <- err
	}
}

// sendRenew sends a renew carrying the pending checkpoint, if any.
func (t *term) sendRenew() {
	e := t.e
	e.mu.Lock()
	cp, gen := t.pending, t.gen
	e.mu.Unlock()
	var rctx context.Context
	rctx, t.cancelRenew = context.WithCancel(context.WithoutCancel(t.ctx))
	t.inFlight = true
	t.covered, t.queued = t.queued, nil
	go func(at time.Time, sess *Session) {
		req := RenewRequest{Holder: e.cfg.Holder, FencingToken: t.token, Checkpoint: cp}
		var r Lease
		var err error
		if sess != nil {
			actx, cancel := context.WithTimeout(rctx, e.attemptTimeout())
			r, err = sess.Renew(actx, e.name, req)
			cancel()
		} else {
			r, err = e.c.renew(rctx, e.name, req, callOpts{attempts: 1, timeout: e.attemptTimeout()})
		}
		t.results <- renewResult{l: r, err: err, sent: at, gen: gen, cp: cp != nil}
	}(e.cfg.Clock.Now(), t.sess)
}

// onRenewTimer renews when it is time to.
func (t *term) onRenewTimer() {
	if t.phase != termRenewing || t.inFlight || t.busy() {
		return
	}
	if t.sess != nil {
		// The service renews a session's leases: a renew only writes a
		// checkpoint set since (SetCheckpoint).
		e := t.e
		e.mu.Lock()
		idle := t.pending == nil
		e.mu.Unlock()
		if idle && len(t.queued) == 0 {
			t.renewT.Reset(e.jittered(e.cfg.RenewInterval))
			return
		}
	}
	t.sendRenew()
}

// onRequest takes a Checkpoint or Transfer request of the Elector.
func (t *term) onRequest(r termReq) {
	e := t.e
	switch {
	case t.phase != termRenewing:
		e.mu.Lock()
		over := t.ended
		e.mu.Unlock()
		r.done <- fmt.Errorf("%w: %w", ErrNotLeading, over)
	case r.to != "" && t.busy():
		r.done <- errors.New("client: Elector.Transfer: a transfer is already in flight")
	case r.to != "":
		t.transfer = &r
		t.cancelRenew() // no renew may land after the transfer: it would say lost
		e.mu.Lock()
		cp := r.checkpoint
		if cp == nil {
			cp = t.pending
		}
		e.mu.Unlock()
		go func(sess *Session) {
			req := TransferRequest{Holder: e.cfg.Holder, FencingToken: t.token, To: r.to, Checkpoint: cp}
			var err error
			if sess != nil {
				_, err = sess.Transfer(r.ctx, e.name, req)
			} else {
				_, err = e.c.transfer(r.ctx, e.name, req, callOpts{})
			}
			t.transferDone <- err
		}(t.sess)
	default:
		t.queued = append(t.queued, r)
		if !t.inFlight && !t.busy() {
			t.sendRenew()
		}
	}
}

// onTransferDone takes the answer to the transfer in flight.
func (t *term) onTransferDone(err error) {
	r := *t.transfer
	t.transfer = nil
	switch {
	case err == nil:
		t.phase = termGone
		t.cancelRenew()
		t.log("leasesvc elector: transferred", false, "to", r.to)
		t.end(fmt.Errorf("%w to %q", ErrTransferred, r.to), ErrTransferred)
		reply(t.queued, ErrNotLeading)
		t.queued = nil
	case errors.Is(err, ErrLost):
		t.phase = termGone
		t.log("leasesvc elector: leadership lost", true, "err", err)
		t.end(err, err)
	default:
		t.log("leasesvc elector: transfer failed", true, "to", r.to, "err", err)
		if t.phase == termRenewing && !t.inFlight {
			t.renewT.Reset(0) // renewals were held back: catch up now
		}
		if t.held != nil {
			select {
			case <-t.held.lost: // the service ended it while the transfer was in flight
				t.lostCh = t.held.lost
			default:
			}
		}
	}
	r.done <- err
}

// onRenewResult takes the answer to a renew. It returns the renewed lease
// and true when the renew moved the safe deadline.
func (t *term) onRenewResult(r renewResult) (Lease, bool) {
	e, clock := t.e, t.e.cfg.Clock
	t.inFlight = false
	if r.err == nil && r.cp {
		e.mu.Lock()
		if t.gen == r.gen {
			t.pending = nil
		}
		e.mu.Unlock()
	}
	reply(t.covered, r.err)
	t.covered = nil
	if t.phase != termRenewing || t.busy() {
		return Lease{}, false
	}
	switch {
	case r.err == nil && t.sess != nil:
		t.failures = 0 // the session's heartbeats, not renewals, move the deadline
		t.renewT.Reset(e.jittered(e.cfg.RenewInterval))
	case r.err == nil:
		t.failures = 0
		t.stopAt = t.deadline(r.sent).Add(-e.cfg.CancelBefore)
		t.stop.Reset(t.stopAt.Sub(clock.Now()))
		if e.cfg.OnSafeDeadline != nil {
			e.cfg.OnSafeDeadline(t.deadline(r.sent))
		}
		t.renewT.Reset(r.sent.Add(e.jittered(e.cfg.RenewInterval)).Sub(clock.Now()))
	case errors.Is(r.err, ErrLost) || permanent(r.err):
		t.phase = termStopped
		if errors.Is(r.err, ErrLost) {
			t.phase = termGone
		}
		t.log("leasesvc elector: leadership lost", true, "err", r.err)
		t.end(r.err, r.err)
		reply(t.queued, r.err)
		t.queued = nil
		return Lease{}, false
	default:
		t.lastErr = r.err
		t.log("leasesvc elector: renew failed", true, "err", r.err)
		t.renewT.Reset(e.retryDelay(r.err, t.failures))
		t.failures++
	}
	if len(t.queued) > 0 {
		t.sendRenew()
	}
	return r.l, r.err == nil
}

// onDeadline ends the term at its safe deadline.
func (t *term) onDeadline() {
	if t.phase != termRenewing {
		return
	}
	t.phase = termStopped
	t.cancelRenew()
	if t.lastErr == nil {
		t.lastErr = errors.New("no answer to the renew in time")
		if t.sess != nil {
			t.lastErr = errors.New("no heartbeat of the session was acknowledged in time")
		}
	}
	t.log("leasesvc elector: safe deadline reached", true, "err", t.lastErr)
	cause := fmt.Errorf("%w: %w", ErrSafeDeadline, t.lastErr)
	t.end(cause, cause)
	reply(t.queued, cause)
	t.queued = nil
}

// finish ends the term once the leading callback has returned: it releases
// the holding when release says so and it is not gone, and answers the
// checkpoint writes still waiting.
func (t *term) finish(release bool) {
	t.end(context.Canceled, nil)
	t.cancelRenew()
	var err error = ErrNotLeading
	if release && t.phase != termGone {
		err = t.release()
	}
	reply(t.covered, err)
	reply(t.queued, err)
}

// release gives up the holding after a graceful stop, a resignation or a
// step-down, with its pending checkpoint, if any. From here on the term
// takes no more checkpoints.
func (t *term) release() error {
	e := t.e
	e.mu.Lock()
	cp := t.pending
	if t.ended == nil {
		t.ended = errors.New("released")
	}
	e.mu.Unlock()
	t.phase = termReleased
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.ReleaseTimeout)
	defer cancel()
	req := ReleaseRequest{Holder: e.cfg.Holder, FencingToken: t.token, Checkpoint: cp}
	var err error
	if t.sess != nil {
		_, err = t.sess.ReleaseWith(ctx, e.name, req)
	} else {
		_, err = e.c.release(ctx, e.name, req, callOpts{})
	}
	if err != nil {
		t.log("leasesvc elector: release failed; the lease runs out at its expiry", true, "err", err)
	}
	return err
}

// onSessionDeadline follows the session's deadline, which moved: the term
// ends at it (less CancelBefore), whatever the socket says.
func (t *term) onSessionDeadline() {
	e, clock := t.e, t.e.cfg.Clock
	t.sessChanged = t.sess.deadlineChanged()
	if t.phase != termRenewing {
		return
	}
	d := t.sess.Deadline()
	t.stopAt = d.Add(-e.cfg.CancelBefore)
	t.stop.Reset(t.stopAt.Sub(clock.Now()))
	if e.cfg.OnSafeDeadline != nil && !d.IsZero() {
		e.cfg.OnSafeDeadline(d)
	}
}

// onSessionLost ends the term: the service ended the holding (lost,
// revoked, the session ended). During a transfer, the transfer's answer
// decides.
func (t *term) onSessionLost() {
	t.lostCh = nil
	if t.busy() || (t.phase != termRenewing && t.phase != termStopped) {
		return
	}
	err := fmt.Errorf("%w: the holding ended", ErrLost)
	if t.held != nil {
		err = t.held.lostErr
	}
	t.phase = termGone
	t.cancelRenew()
	t.log("leasesvc elector: leadership lost", true, "err", err)
	t.end(err, err)
	reply(t.queued, err)
	t.queued = nil
}
