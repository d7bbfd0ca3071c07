package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
// lead loop returns: it renews the holding through its Keeper (the
// Holding, which keeps the safe deadline), writes checkpoints with its
// renewals, transfers and releases it. The campaign (Elector.campaign,
// Elector.lead) decides when to lead and when to stop; the term only says
// when the holding can no longer be led on, through end. It knows neither
// its Elector nor how the Keeper holds the lease.
//
// The lead loop is the only goroutine that calls its methods, except
// setPending and over, which hold mu.
type term struct {
	cfg termConfig
	h   Holding

	mu      sync.Mutex
	pending json.RawMessage // the latest checkpoint not yet known to be stored
	gen     uint64          // counts setPending calls, so a renew clears only what it sent
	// ended says why the holding can take no more checkpoints (lost, run
	// out, transferred, released); nil while it can.
	ended error

	reqs chan termReq  // to the lead loop
	over chan struct{} // closed when the lead loop has returned
	wake chan struct{} // a checkpoint is pending: arm the write timer

	// Owned by the lead loop.
	phase termPhase
	// end cancels the leading ctx with cause; over, if not nil, also says
	// that the holding takes no more checkpoints.
	end          func(cause, over error)
	ctx          context.Context // Run's; renewals outlive its cancellation
	stopAt       time.Time       // the safe deadline less CancelBefore
	reported     time.Time       // the last deadline told to OnSafeDeadline
	stop, renewT Timer
	// renewArmed: renewT is armed to write what is pending. (The Keeper
	// keeps the holding: the term renews only to write checkpoints.)
	renewArmed  bool
	results     chan renewResult
	cancelRenew context.CancelFunc
	inFlight    bool
	failures    int
	lastErr     error
	// Checkpoint writes waiting for a renew: queued ones for the next,
	// covered ones for the one in flight.
	queued, covered []termReq
	transfer        *termReq // in flight (Elector.Transfer)
	transferDone    chan error

	// What the lead loop selects on from the Holding (nil when done with).
	changed <-chan struct{} // the deadline moved
	done    <-chan struct{} // the holding ended
	yieldCh <-chan string   // a preempting candidate asks for it
}

// termConfig is what a term needs of its Elector's configuration.
type termConfig struct {
	name, holder   string
	clock          Clock
	logger         *slog.Logger
	cancelBefore   time.Duration
	renewInterval  time.Duration
	attemptTimeout time.Duration
	releaseTimeout time.Duration
	jittered       func(time.Duration) time.Duration
	retryDelay     func(err error, failures int) time.Duration
	onSafeDeadline func(time.Time) // may be nil
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

// newTerm returns the term of the holding h, renewing. Its timers are
// armed by arm.
func newTerm(ctx context.Context, cfg termConfig, h Holding, end func(cause, over error)) *term {
	return &term{cfg: cfg, h: h, reqs: make(chan termReq), over: make(chan struct{}), wake: make(chan struct{}, 1),
		end: end, ctx: ctx, results: make(chan renewResult, 1), cancelRenew: func() {}, transferDone: make(chan error, 1),
		changed: h.Changed(), done: h.Done(), yieldCh: h.YieldRequests()}
}

// setPending stores cp as the pending checkpoint, unless the holding takes
// no more.
func (t *term) setPending(cp json.RawMessage) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended != nil {
		return fmt.Errorf("%w: %w", ErrNotLeading, t.ended)
	}
	t.pending, t.gen = cp, t.gen+1
	select {
	case t.wake <- struct{}{}:
	default:
	}
	return nil
}

// endedErr says why the holding takes no more checkpoints; nil while it
// does.
func (t *term) endedErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ended
}

// setEnded records why the holding takes no more checkpoints, once.
func (t *term) setEnded(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended == nil {
		t.ended = err
	}
}

// arm starts the term's stop timer (StopAt) and makes its write timer,
// unarmed until a checkpoint is pending.
func (t *term) arm() {
	clock := t.cfg.clock
	t.stopAt = StopAt(t.h.Deadline(), t.cfg.cancelBefore)
	t.stop = clock.NewTimer(t.stopAt.Sub(clock.Now()))
	t.renewT = clock.NewTimer(t.cfg.renewInterval)
	t.renewT.Stop()
}

// resetRenew arms the write timer to fire after d.
func (t *term) resetRenew(d time.Duration) {
	t.renewT.Reset(d)
	t.renewArmed = true
}

// onWake arms the write timer for a checkpoint just set pending: it is
// written with the next renew, within RenewInterval.
func (t *term) onWake() {
	if t.phase == termRenewing && !t.renewArmed && !t.inFlight && !t.busy() {
		t.resetRenew(t.cfg.jittered(t.cfg.renewInterval))
	}
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
	args = append([]any{"lease", t.cfg.name, "holder", t.cfg.holder, "fencingToken", t.h.Token()}, args...)
	if warn {
		t.cfg.logger.Warn(msg, args...)
		return
	}
	t.cfg.logger.Info(msg, args...)
}

// reply answers every request of rs with err.
func reply(rs []termReq, err error) {
	for _, r := range rs {
		r.done <- err
	}
}

// sendRenew sends a renew carrying the pending checkpoint, if any.
func (t *term) sendRenew() {
	t.mu.Lock()
	cp, gen := t.pending, t.gen
	t.mu.Unlock()
	var rctx context.Context
	rctx, t.cancelRenew = context.WithCancel(context.WithoutCancel(t.ctx))
	t.inFlight = true
	t.covered, t.queued = t.queued, nil
	go func(at time.Time) {
		actx, cancel := context.WithTimeout(rctx, t.cfg.attemptTimeout)
		r, err := t.h.renewWith(actx, RenewRequest{Holder: t.cfg.holder, FencingToken: t.h.Token(), Checkpoint: cp}, callOpts{attempts: 1})
		cancel()
		t.results <- renewResult{l: r, err: err, sent: at, gen: gen, cp: cp != nil}
	}(t.cfg.clock.Now())
}

// onRenewTimer renews when there is a checkpoint to write: the Keeper
// keeps the holding itself (renewals, or its session's heartbeats).
func (t *term) onRenewTimer() {
	t.renewArmed = false
	if t.phase != termRenewing || t.inFlight || t.busy() {
		return
	}
	t.mu.Lock()
	write := t.pending != nil
	t.mu.Unlock()
	if !write && len(t.queued) == 0 {
		return
	}
	t.sendRenew()
}

// onRequest takes a Checkpoint or Transfer request of the Elector.
func (t *term) onRequest(r termReq) {
	switch {
	case t.phase != termRenewing:
		r.done <- fmt.Errorf("%w: %w", ErrNotLeading, t.endedErr())
	case r.to != "" && t.busy():
		r.done <- errors.New("client: Elector.Transfer: a transfer is already in flight")
	case r.to != "":
		t.transfer = &r
		t.cancelRenew() // no renew may land after the transfer: it would say lost
		t.mu.Lock()
		cp := r.checkpoint
		if cp == nil {
			cp = t.pending
		}
		t.mu.Unlock()
		go func() {
			_, err := t.h.Transfer(r.ctx, TransferRequest{Holder: t.cfg.holder, FencingToken: t.h.Token(), To: r.to, Checkpoint: cp})
			t.transferDone <- err
		}()
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
			t.resetRenew(0) // writes were held back: catch up now
		}
		select {
		case <-t.h.Done(): // the service ended it while the transfer was in flight
			t.done = t.h.Done()
		default:
		}
	}
	r.done <- err
}

// onRenewResult takes the answer to a renew. It returns the renewed lease
// and true when the renew succeeded.
func (t *term) onRenewResult(r renewResult) (Lease, bool) {
	t.inFlight = false
	if r.err == nil && r.cp {
		t.mu.Lock()
		if t.gen == r.gen {
			t.pending = nil
		}
		t.mu.Unlock()
	}
	reply(t.covered, r.err)
	t.covered = nil
	if t.phase != termRenewing || t.busy() {
		return Lease{}, false
	}
	switch {
	case r.err == nil:
		t.failures = 0
		t.onDeadlineMoved()
		t.mu.Lock()
		again := t.pending != nil // set again meanwhile
		t.mu.Unlock()
		if again {
			t.resetRenew(r.sent.Add(t.cfg.jittered(t.cfg.renewInterval)).Sub(t.cfg.clock.Now()))
		}
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
		t.resetRenew(t.cfg.retryDelay(r.err, t.failures))
		t.failures++
	}
	if len(t.queued) > 0 {
		t.sendRenew()
	}
	return r.l, r.err == nil
}

// onDeadline ends the term at its safe deadline, unless the holding's
// deadline moved meanwhile.
func (t *term) onDeadline() {
	if t.phase != termRenewing {
		return
	}
	if t.cfg.clock.Now().Before(StopAt(t.h.Deadline(), t.cfg.cancelBefore)) {
		t.onDeadlineMoved() // a move this loop has not handled yet
		return
	}
	t.phase = termStopped
	t.cancelRenew()
	if t.lastErr == nil {
		t.lastErr = t.h.unconfirmed()
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
	t.mu.Lock()
	cp := t.pending
	if t.ended == nil {
		t.ended = errors.New("released")
	}
	t.mu.Unlock()
	t.phase = termReleased
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.releaseTimeout)
	defer cancel()
	_, err := t.h.Release(ctx, cp)
	if err != nil {
		t.log("leasesvc elector: release failed; the lease runs out at its expiry", true, "err", err)
	}
	return err
}

// onDeadlineMoved follows the holding's deadline, which moved: the term
// ends at it (less CancelBefore), whatever the socket says.
func (t *term) onDeadlineMoved() {
	t.changed = t.h.Changed()
	if t.phase != termRenewing {
		return
	}
	d := t.h.Deadline()
	t.stopAt = StopAt(d, t.cfg.cancelBefore)
	t.stop.Reset(t.stopAt.Sub(t.cfg.clock.Now()))
	if t.cfg.onSafeDeadline != nil && !d.IsZero() && !d.Equal(t.reported) {
		t.reported = d
		t.cfg.onSafeDeadline(d)
	}
}

// onLost ends the term: the service ended the holding (lost, revoked, the
// session ended). During a transfer, the transfer's answer decides.
func (t *term) onLost() {
	t.done = nil
	if t.busy() || (t.phase != termRenewing && t.phase != termStopped) {
		return
	}
	err := t.h.Err()
	if err == nil {
		err = fmt.Errorf("%w: the holding ended", ErrLost)
	}
	t.phase = termGone
	t.cancelRenew()
	t.log("leasesvc elector: leadership lost", true, "err", err)
	t.end(err, err)
	reply(t.queued, err)
	t.queued = nil
}
