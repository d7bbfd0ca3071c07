package client

import (
	"bytes"
	"context"
	"encoding/json"
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
// write downstream must carry the fencing token (TokenFromContext), and
// downstream systems must refuse tokens lower than the highest they have
// seen. The callbacks run only as long as they honour ctx: the Elector
// cannot stop code that ignores it.
type Elector struct {
	c    *Client
	name string
	cfg  ElectorConfig
	safe time.Duration // TTL × (1 − DriftMargin)

	running atomic.Bool

	mu           sync.Mutex
	leading      bool
	token        int64      // of the current term, while leading
	term         *termState // the current term, from its start until lead returns
	leaderHolder string
	leaderToken  int64
}

// termState is what Checkpoint, SetCheckpoint and Transfer share with the
// lead loop of one term. Its fields are guarded by Elector.mu.
type termState struct {
	token   int64
	pending json.RawMessage // the latest checkpoint not yet known to be stored
	gen     uint64          // counts SetCheckpoint calls, so a renew clears only what it sent
	// ended says why the holding can take no more checkpoints (lost, run
	// out, transferred, released); nil while it can.
	ended error
	reqs  chan termReq  // to the lead loop
	over  chan struct{} // closed when the lead loop has returned
}

// termReq asks the lead loop to write the pending checkpoint now (to == "")
// or to transfer the holding to to.
type termReq struct {
	ctx        context.Context
	to         string
	checkpoint json.RawMessage
	done       chan error // buffered: the loop never blocks on it
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
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("client.NewElector: %w", err)
	}
	return &Elector{c: c, name: name, cfg: cfg, safe: safeSpan(cfg.TTL, cfg.DriftMargin)}, nil
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

type checkpointKey struct{}

// inherited is the checkpoint a term began with.
type inherited struct {
	checkpoint json.RawMessage
	token      int64
}

// CheckpointFromContext returns the checkpoint that the term whose leading
// ctx ctx is (or derives from) inherited (docs/contract.md §8): the JSON
// object its predecessor (or an earlier term of this Elector) last wrote,
// as the acquire answered it, and the fencing token of the holding that
// wrote it. nil and 0 when the lease has no checkpoint or ctx is no
// leading ctx. Resume the work from it.
func CheckpointFromContext(ctx context.Context) (checkpoint json.RawMessage, writtenBy int64) {
	in, _ := ctx.Value(checkpointKey{}).(inherited)
	return in.checkpoint, in.token
}

// encodeCheckpoint returns v as a JSON object of at most
// MaxCheckpointBytes: a json.RawMessage or []byte is taken as it is,
// anything else is marshalled.
func encodeCheckpoint(v any) (json.RawMessage, error) {
	var raw []byte
	switch x := v.(type) {
	case json.RawMessage:
		raw = x
	case []byte:
		raw = x
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("client: checkpoint: %w", err)
		}
		raw = b
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("client: checkpoint must be a JSON object: %w", err)
	}
	if buf.Len() == 0 || buf.Bytes()[0] != '{' {
		return nil, errors.New("client: checkpoint must be a JSON object")
	}
	if buf.Len() > MaxCheckpointBytes {
		return nil, fmt.Errorf("client: checkpoint is %d bytes, more than %d", buf.Len(), MaxCheckpointBytes)
	}
	return buf.Bytes(), nil
}

// SetCheckpoint records v, a JSON object of at most 16 KiB (a
// json.RawMessage is sent as it is, anything else is marshalled), as the
// checkpoint of the current term (docs/contract.md §8). It is written with
// the next renew, or with the release or transfer that ends the term if
// that comes first, and the next holder inherits it
// (CheckpointFromContext). A later call replaces a checkpoint not yet
// written. It costs no request. It may be called until OnStartedLeading
// returns, also after the leading ctx is cancelled by a graceful stop or
// a step-down (the release then carries it). Without a term, or once the
// holding is lost, it returns an error that matches ErrNotLeading.
func (e *Elector) SetCheckpoint(v any) error {
	cp, err := encodeCheckpoint(v)
	if err != nil {
		return err
	}
	_, err = e.setPending(cp)
	return err
}

// setPending stores cp as the term's pending checkpoint.
func (e *Elector) setPending(cp json.RawMessage) (*termState, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.term
	if t == nil {
		return nil, ErrNotLeading
	}
	if t.ended != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotLeading, t.ended)
	}
	t.pending, t.gen = cp, t.gen+1
	return t, nil
}

// Checkpoint is SetCheckpoint, then writes the checkpoint at once with a
// renew of the holding and returns when the service has stored it: after
// it returns nil, a successor inherits it even if this process dies now.
// ctx bounds the wait. When the renew fails, the error is returned and the
// checkpoint stays pending: the next renew, or the release, sends it. It
// works the same after the leading ctx was cancelled by a graceful stop or
// a step-down (not a loss), since the Elector renews until
// OnStartedLeading returns. Without a term, or once the holding is lost,
// it returns an error that matches ErrNotLeading. It may be called from
// OnStartedLeading and OnYieldRequested.
func (e *Elector) Checkpoint(ctx context.Context, v any) error {
	cp, err := encodeCheckpoint(v)
	if err != nil {
		return err
	}
	t, err := e.setPending(cp)
	if err != nil {
		return err
	}
	return e.ask(ctx, t, termReq{ctx: ctx})
}

// Transfer hands the holding over to the holder to (docs/contract.md §8):
// the service ends the holding now, writes checkpoint (if not nil, as
// SetCheckpoint takes it; nil sends the pending one, if any) and reserves
// the lease for to for the service's default of 5s, so that
// to's acquire gets the next fencing token and the checkpoint, and
// anyone else's is refused meanwhile. Stop acting as leader before calling
// it: to may begin as soon as the service has answered. On success the
// leading ctx is cancelled with a cause that matches ErrTransferred, no
// release follows, and once OnStartedLeading has returned the Elector
// campaigns again as a follower (cancel Run's ctx to stop it). It may be
// called from OnStartedLeading. On failure the term goes on, unless the
// holding was lost. Without a term it returns ErrNotLeading.
func (e *Elector) Transfer(ctx context.Context, to string, checkpoint any) error {
	var cp json.RawMessage
	if checkpoint != nil {
		var err error
		if cp, err = encodeCheckpoint(checkpoint); err != nil {
			return err
		}
	}
	if to == "" || to == e.cfg.Holder {
		return fmt.Errorf("client: Elector.Transfer: the successor %q must be another holder than %q", to, e.cfg.Holder)
	}
	e.mu.Lock()
	t := e.term
	var ended error
	if t != nil {
		ended = t.ended
	}
	e.mu.Unlock()
	switch {
	case t == nil:
		return ErrNotLeading
	case ended != nil:
		return fmt.Errorf("%w: %w", ErrNotLeading, ended)
	}
	return e.ask(ctx, t, termReq{ctx: ctx, to: to, checkpoint: cp})
}

// ask hands r to the lead loop of t and waits for its answer.
func (e *Elector) ask(ctx context.Context, t *termState, r termReq) error {
	r.done = make(chan error, 1)
	select {
	case t.reqs <- r:
	case <-t.over:
		return ErrNotLeading
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
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
	for {
		l, sent, err := e.campaign(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("client: elector %q: %w", e.name, err)
		}
		if done := e.lead(ctx, l, sent); done {
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

// campaign acquires the lease, returning it and the local time at which the
// acquire (or the renew that confirmed it) was sent.
func (e *Elector) campaign(ctx context.Context) (Lease, time.Time, error) {
	failures := 0
	// The first acquire, and the first after a failure, does not wait: the
	// answer says at once who leads (OnNewLeader, Leader). The next ones wait
	// on the service for that holding to end.
	wait := false
	for {
		if ctx.Err() != nil {
			return Lease{}, time.Time{}, ctx.Err()
		}
		req := AcquireRequest{Holder: e.cfg.Holder, TTL: e.cfg.TTL, Metadata: e.cfg.Metadata,
			Priority: e.cfg.Priority, Candidate: e.candidate()}
		if wait {
			req.Wait = max(e.cfg.Wait, 0)
			req.Preempt = e.cfg.Preempt && req.Wait > 0
		}
		sent := e.cfg.Clock.Now()
		l, err := e.acquireOnce(ctx, req)
		var held *HeldError
		var reserved *ReservedError
		switch {
		case err == nil:
			e.observe(l)
			if e.cfg.Clock.Now().Sub(sent) <= e.cfg.RenewInterval/2 {
				return l, sent, nil
			}
			// The acquire waited on the service: the holding began well after
			// it was sent. A renew sent now gives a deadline that is not
			// mostly spent already.
			now := e.cfg.Clock.Now()
			r, err := e.c.renew(ctx, e.name, RenewRequest{Holder: e.cfg.Holder, FencingToken: l.FencingToken}, callOpts{attempts: 1, timeout: e.attemptTimeout()})
			if err == nil {
				return r, now, nil
			}
			if errors.Is(err, ErrLost) {
				continue // it ran out meanwhile: campaign again
			}
			return l, sent, nil // lead on the acquire's deadline, however short
		case ctx.Err() != nil: // acquireOnce gave up what it may have taken
			return Lease{}, time.Time{}, ctx.Err()
		case errors.As(err, &held):
			failures = 0
			e.observe(held.Lease)
			if e.cfg.Wait > 0 && (!wait || e.cfg.Clock.Now().Sub(sent) >= e.cfg.Wait/10) {
				wait = true
				continue // wait on the service now, or again
			}
			// No waiting (or the service answered early): poll.
			if !e.sleep(ctx, e.jittered(e.cfg.RenewInterval)) {
				return Lease{}, time.Time{}, ctx.Err()
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
				return Lease{}, time.Time{}, ctx.Err()
			}
		case permanent(err):
			return Lease{}, time.Time{}, err
		default:
			wait = false
			e.cfg.Logger.Warn("leasesvc elector: acquire failed", "lease", e.name, "holder", e.cfg.Holder, "err", err)
			if !e.sleep(ctx, e.retryDelay(err, failures)) {
				return Lease{}, time.Time{}, ctx.Err()
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
	d := e.cfg.RetryBackoff.Delay(failures)
	var ce *Error
	if errors.As(err, &ce) && errors.Is(ce, ErrRateLimited) && ce.RetryAfter > d {
		return ce.RetryAfter
	}
	return d
}

// acquireOnce sends one acquire of the campaign. When ctx ends while it is
// in flight, it gives up what the acquire may have taken, so followers need
// not wait for a holding nobody renews to run out, and returns ctx's error.
//
// An acquire that does not wait is not cancelled then: a request cancelled
// in flight may still be decided by the service after anything read to
// find out, so the answer is awaited (up to ReleaseTimeout) and the holding
// it gives released by its token. A waiting acquire is cancelled, so that
// the service stops waiting, and what the lease shows afterwards is
// released if it is this holder's (abandon).
func (e *Elector) acquireOnce(ctx context.Context, req AcquireRequest) (Lease, error) {
	if req.Wait > 0 {
		l, err := e.c.acquire(ctx, e.name, req, callOpts{attempts: 1})
		if err != nil && ctx.Err() != nil {
			e.abandon()
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
		l, err := e.c.acquire(actx, e.name, req, callOpts{attempts: 1})
		ch <- answer{l, err}
	}()
	select {
	case a := <-ch:
		return a.l, a.err
	case <-ctx.Done():
	}
	stop := time.AfterFunc(e.cfg.ReleaseTimeout, cancel) // the process's clock, as release's timeout
	defer stop.Stop()
	if a := <-ch; a.err == nil {
		rctx, rcancel := context.WithTimeout(context.Background(), e.cfg.ReleaseTimeout)
		defer rcancel()
		_, _ = e.c.release(rctx, e.name, ReleaseRequest{Holder: e.cfg.Holder, FencingToken: a.l.FencingToken}, callOpts{attempts: 2})
	} else {
		e.abandon() // no answer: what the lease shows
	}
	return Lease{}, ctx.Err()
}

// abandon releases a holding that an acquire cancelled in flight may have
// obtained without this Elector hearing of it, so followers need not wait
// for it to run out.
func (e *Elector) abandon() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.ReleaseTimeout)
	defer cancel()
	l, err := e.c.Get(ctx, e.name)
	if err == nil && l.Held && l.Holder == e.cfg.Holder {
		_, _ = e.c.release(ctx, e.name, ReleaseRequest{Holder: e.cfg.Holder, FencingToken: l.FencingToken}, callOpts{attempts: 2})
	}
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

// renewResult is the outcome of one renew attempt.
type renewResult struct {
	l    Lease
	err  error
	sent time.Time
	gen  uint64 // the checkpoint generation it carried
	cp   bool   // it carried a checkpoint
}

// lead runs one term of leadership for the holding l, acquired or renewed
// by a request sent at sent. It returns true when Run should return (a
// graceful stop or a resignation) and false to campaign again.
func (e *Elector) lead(ctx context.Context, l Lease, sent time.Time) bool {
	clock := e.cfg.Clock
	stopAt := sent.Add(e.safe - e.cfg.CancelBefore)
	if !clock.Now().Before(stopAt) {
		return false // too late to lead on this holding
	}
	vctx := context.WithValue(ctx, tokenKey{}, l.FencingToken)
	vctx = context.WithValue(vctx, checkpointKey{}, inherited{checkpoint: l.Checkpoint, token: l.CheckpointToken})
	termCtx, cancelTerm := context.WithCancelCause(vctx)
	defer cancelTerm(context.Canceled)
	t := &termState{token: l.FencingToken, reqs: make(chan termReq), over: make(chan struct{})}
	e.mu.Lock()
	e.leading, e.token, e.term = true, l.FencingToken, t
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.term = nil
		e.mu.Unlock()
		close(t.over)
	}()
	e.cfg.Logger.Info("leasesvc elector: leading", "lease", e.name, "holder", e.cfg.Holder, "fencingToken", l.FencingToken)

	if e.cfg.OnSafeDeadline != nil {
		e.cfg.OnSafeDeadline(sent.Add(e.safe))
	}
	cbDone := make(chan struct{})
	go func() {
		defer close(cbDone)
		e.cfg.OnStartedLeading(termCtx)
	}()

	// end cancels the leading ctx; over, if not nil, also says that the
	// holding takes no more checkpoints.
	end := func(cause, over error) {
		e.mu.Lock()
		e.leading = false
		if over != nil && t.ended == nil {
			t.ended = over
		}
		e.mu.Unlock()
		cancelTerm(cause)
	}

	stop := clock.NewTimer(stopAt.Sub(clock.Now()))
	defer stop.Stop()
	renewT := clock.NewTimer(sent.Add(e.jittered(e.cfg.RenewInterval)).Sub(clock.Now()))
	defer renewT.Stop()
	results := make(chan renewResult, 1)
	var cancelRenew context.CancelFunc = func() {}
	defer func() { cancelRenew() }()
	inFlight, renewing := false, true
	lost := false // the holding is gone (lost, or transferred): no release
	failures := 0
	var lastErr error
	graceful, steppedDown, cbReturned, resigned := false, false, false, false
	parentDone := ctx.Done()
	// stopping begins a graceful stop: Run's ctx is done.
	stopping := func() {
		parentDone = nil
		graceful = true
		end(context.Cause(ctx), nil)
		e.cfg.Logger.Info("leasesvc elector: stopping", "lease", e.name, "holder", e.cfg.Holder)
	}

	// Checkpoint writes waiting for a renew: queued ones for the next,
	// covered ones for the one in flight.
	var queued, covered []termReq
	reply := func(rs []termReq, err error) {
		for _, r := range rs {
			r.done <- err
		}
	}
	sendRenew := func() {
		e.mu.Lock()
		cp, gen := t.pending, t.gen
		e.mu.Unlock()
		var rctx context.Context
		rctx, cancelRenew = context.WithCancel(context.WithoutCancel(ctx))
		inFlight = true
		covered, queued = queued, nil
		go func(at time.Time) {
			r, err := e.c.renew(rctx, e.name, RenewRequest{Holder: e.cfg.Holder, FencingToken: l.FencingToken, Checkpoint: cp},
				callOpts{attempts: 1, timeout: e.attemptTimeout()})
			results <- renewResult{l: r, err: err, sent: at, gen: gen, cp: cp != nil}
		}(clock.Now())
	}

	// A yield request, asked once per term (OnYieldRequested).
	yieldAsked := false
	yieldDone := make(chan string, 1)
	// A transfer in flight (Elector.Transfer).
	var transfer *termReq
	transferDone := make(chan error, 1)

	for {
		if cbReturned && transfer == nil {
			end(context.Canceled, nil)
			cancelRenew()
			resigned = resigned && !lost // a transfer that finished meanwhile is no resignation
			var err error = ErrNotLeading
			if (graceful || resigned || steppedDown) && !lost {
				err = e.release(t)
			}
			reply(covered, err)
			reply(queued, err)
			e.cfg.Logger.Info("leasesvc elector: stopped leading", "lease", e.name, "holder", e.cfg.Holder, "fencingToken", l.FencingToken)
			if e.cfg.OnStoppedLeading != nil {
				e.cfg.OnStoppedLeading()
			}
			return graceful || resigned
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
			resigned = !graceful && !steppedDown && termCtx.Err() == nil

		case r := <-t.reqs:
			switch {
			case !renewing:
				e.mu.Lock()
				over := t.ended
				e.mu.Unlock()
				r.done <- fmt.Errorf("%w: %w", ErrNotLeading, over)
			case r.to != "" && transfer != nil:
				r.done <- errors.New("client: Elector.Transfer: a transfer is already in flight")
			case r.to != "":
				transfer = &r
				cancelRenew() // no renew may land after the transfer: it would say lost
				e.mu.Lock()
				cp := r.checkpoint
				if cp == nil {
					cp = t.pending
				}
				e.mu.Unlock()
				go func() {
					_, err := e.c.transfer(r.ctx, e.name, TransferRequest{Holder: e.cfg.Holder, FencingToken: l.FencingToken, To: r.to, Checkpoint: cp}, callOpts{})
					transferDone <- err
				}()
			default:
				queued = append(queued, r)
				if !inFlight && transfer == nil {
					sendRenew()
				}
			}

		case err := <-transferDone:
			r := *transfer
			transfer = nil
			switch {
			case err == nil:
				lost, renewing = true, false
				cancelRenew()
				e.cfg.Logger.Info("leasesvc elector: transferred", "lease", e.name, "holder", e.cfg.Holder, "fencingToken", l.FencingToken, "to", r.to)
				end(fmt.Errorf("%w to %q", ErrTransferred, r.to), ErrTransferred)
				reply(queued, ErrNotLeading)
				queued = nil
			case errors.Is(err, ErrLost):
				lost, renewing = true, false
				e.cfg.Logger.Warn("leasesvc elector: leadership lost", "lease", e.name, "holder", e.cfg.Holder, "fencingToken", l.FencingToken, "err", err)
				end(err, err)
			default:
				e.cfg.Logger.Warn("leasesvc elector: transfer failed", "lease", e.name, "holder", e.cfg.Holder, "fencingToken", l.FencingToken, "to", r.to, "err", err)
				if renewing && !inFlight {
					renewT.Reset(0) // renewals were held back: catch up now
				}
			}
			r.done <- err

		case to := <-yieldDone:
			if renewing && transfer == nil && !graceful && termCtx.Err() == nil {
				steppedDown = true
				e.cfg.Logger.Info("leasesvc elector: stepping down", "lease", e.name, "holder", e.cfg.Holder, "fencingToken", l.FencingToken, "yieldTo", to)
				end(fmt.Errorf("%w %q", ErrYielded, to), nil)
			}

		case <-renewT.C():
			if !renewing || inFlight || transfer != nil {
				continue
			}
			sendRenew()

		case r := <-results:
			inFlight = false
			if r.err == nil && r.cp {
				e.mu.Lock()
				if t.gen == r.gen {
					t.pending = nil
				}
				e.mu.Unlock()
			}
			reply(covered, r.err)
			covered = nil
			if !renewing || transfer != nil {
				continue
			}
			switch {
			case r.err == nil:
				failures = 0
				stopAt = r.sent.Add(e.safe - e.cfg.CancelBefore)
				stop.Reset(stopAt.Sub(clock.Now()))
				if e.cfg.OnSafeDeadline != nil {
					e.cfg.OnSafeDeadline(r.sent.Add(e.safe))
				}
				renewT.Reset(r.sent.Add(e.jittered(e.cfg.RenewInterval)).Sub(clock.Now()))
				if r.l.YieldRequested && !yieldAsked && !graceful && termCtx.Err() == nil {
					yieldAsked = true
					e.cfg.Logger.Info("leasesvc elector: asked to yield", "lease", e.name, "holder", e.cfg.Holder, "fencingToken", l.FencingToken, "yieldTo", r.l.YieldTo)
					go func(to string) {
						if e.cfg.OnYieldRequested != nil {
							e.cfg.OnYieldRequested(termCtx, to)
						}
						yieldDone <- to
					}(r.l.YieldTo)
				}
			case errors.Is(r.err, ErrLost) || permanent(r.err):
				lost, renewing = errors.Is(r.err, ErrLost), false
				e.cfg.Logger.Warn("leasesvc elector: leadership lost", "lease", e.name, "holder", e.cfg.Holder, "fencingToken", l.FencingToken, "err", r.err)
				end(r.err, r.err)
				reply(queued, r.err)
				queued = nil
				continue
			default:
				lastErr = r.err
				e.cfg.Logger.Warn("leasesvc elector: renew failed", "lease", e.name, "holder", e.cfg.Holder, "fencingToken", l.FencingToken, "err", r.err)
				renewT.Reset(e.retryDelay(r.err, failures))
				failures++
			}
			if len(queued) > 0 {
				sendRenew()
			}

		case <-stop.C():
			if !renewing {
				continue
			}
			renewing = false
			cancelRenew()
			if lastErr == nil {
				lastErr = errors.New("no answer to the renew in time")
			}
			e.cfg.Logger.Warn("leasesvc elector: safe deadline reached", "lease", e.name, "holder", e.cfg.Holder, "fencingToken", l.FencingToken, "err", lastErr)
			cause := fmt.Errorf("%w: %w", ErrSafeDeadline, lastErr)
			end(cause, cause)
			reply(queued, cause)
			queued = nil
		}
	}
}

// release gives up the holding of term t after a graceful stop, a
// resignation or a step-down, with its pending checkpoint, if any. From
// here on the term takes no more checkpoints.
func (e *Elector) release(t *termState) error {
	e.mu.Lock()
	cp := t.pending
	if t.ended == nil {
		t.ended = errors.New("released")
	}
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.ReleaseTimeout)
	defer cancel()
	_, err := e.c.release(ctx, e.name, ReleaseRequest{Holder: e.cfg.Holder, FencingToken: t.token, Checkpoint: cp}, callOpts{})
	if err != nil {
		e.cfg.Logger.Warn("leasesvc elector: release failed; the lease runs out at its expiry", "lease", e.name, "holder", e.cfg.Holder, "fencingToken", t.token, "err", err)
	}
	return err
}
