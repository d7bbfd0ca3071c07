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
// steps down for a preempting candidate (LeaderCallbacks.OnYieldRequested,
// docs/contract.md §8).
var ErrYielded = errors.New("leasesvc: stepped down for a preempting candidate")

// ErrTransferred is the cause of a leading ctx cancelled because
// Elector.Transfer handed the holding over to a named successor.
var ErrTransferred = errors.New("leasesvc: leadership transferred")

// ErrNotLeading is returned by Elector.Checkpoint, SetCheckpoint and
// Transfer when there is no term of leadership they could act on.
var ErrNotLeading = errors.New("leasesvc: elector is not leading")

// Elector campaigns for one lease and keeps it while this process leads,
// like client-go's leaderelection.LeaderElector, on the leasesvc API. It
// is built on a Keeper (NewElector), as etcd's concurrency.Election on its
// Session: the Keeper decides how the lease is held and keeps each holding
// (renewals every RenewInterval, or a session's heartbeats), and the
// Elector reads the Keeper's clock, never one of its own.
//
// Run blocks, campaigning until its ctx is cancelled: it holds the lease
// through its Keeper (Keeper.Hold), waiting on the service (waitMs) while
// another holds it; once leader it calls OnStartedLeading, follows the
// holding's deadline as the Keeper moves it, and ends the term —
// cancelling the leading ctx — at once when the holding is lost (a renew
// answered lease_lost, the session said so or the service ended it), and
// at the stop time (StopAt: the safe deadline less CancelBefore) when
// nothing confirms the holding any more, for any reason (timeouts, 5xx, an
// unreachable service). After a lost term it campaigns again, also when
// the service ended the Keeper's session (the Keeper opens a new one). When
// Run's ctx is cancelled it cancels the leading ctx, waits for
// OnStartedLeading to return while the holding is kept, releases the lease
// so a follower takes over at once, calls OnStoppedLeading and returns
// nil.
//
// An operator's revocation (Client.Revoke) ends the term like any
// lease_lost: with plain renewals the Keeper's next renew is refused and
// the leading ctx is cancelled at that answer, with a cause that matches
// ErrLost (through a session, at the session's push). The Elector learns of
// it only from that renew, so the leader may act for up to RenewInterval
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
// down. A leader asked to step down calls LeaderCallbacks.OnYieldRequested,
// then ends its term and releases the lease (the leading ctx's cause
// matches ErrYielded) and campaigns again as a follower. A leader records
// its progress with Checkpoint (written at once) or SetCheckpoint (written
// by a renew within RenewInterval, or with the release); the next leader, also after a
// crash, finds the last one written in its leading ctx
// (CheckpointFromContext). Transfer hands the lease to a named successor.
//
// # Guarantees and limits
//
// The leading ctx is cancelled no later than the holding's safe deadline
// less CancelBefore: with plain renewals (local monotonic time when the
// last successful acquire or renew was sent) + TTL × (1 − DriftMargin) −
// CancelBefore, through a session the session's deadline less
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
	// k holds the lease: NewElector's, or for an Elector of
	// Client.NewElector the Keeper Run builds (nil outside Run).
	k *Keeper
	// own: Run builds the Keeper (Client.NewElector) and closes it when it
	// returns.
	own bool

	running atomic.Bool

	mu           sync.Mutex
	leading      bool
	token        int64 // of the current term, while leading
	term         *term // the current term, from its start until lead returns
	leaderHolder string
	leaderToken  int64

	// given is ElectorConfig.CancelBefore as given (0: the default for
	// the Keeper's span); cfg.CancelBefore is the value for k (fit).
	given time.Duration
	// logged: ElectorConfig.Logger was given (else the mode line of a
	// Keeper Run builds goes to stderr, sayMode).
	logged bool
}

// NewElector returns an Elector for the lease name over the Keeper k, as
// etcd's concurrency.NewElection(session, prefix): k decides how the lease
// is held (its mode, TTL, renewals, clock, retries), and Run does not
// close it; several Electors may share one Keeper. It checks cfg (see
// ElectorConfig), and CancelBefore against k's span (FitCancelBefore: an
// error wrapping ErrInvalid), and does not modify cfg.
//
// Migration from NewElector(c *Client, name, cfg) with TTL, RenewInterval,
// RenewJitter, DriftMargin, RetryBackoff, ReleaseTimeout, Clock, Session,
// PlainRenewals or Keeper in ElectorConfig: put those in a KeeperConfig,
// build the Keeper (NewKeeper) and pass it here; move OnStartedLeading,
// OnStoppedLeading, OnNewLeader, OnSafeDeadline and OnYieldRequested into
// ElectorConfig.Callbacks. For the defaults (the Client's shared session,
// falling back to plain renewals) use Client.NewElector(name, cfg).
func NewElector(k *Keeper, name string, cfg ElectorConfig) (*Elector, error) {
	if k == nil {
		return nil, errors.New("client.NewElector: Keeper is nil")
	}
	e, err := newElector(k.c, name, cfg)
	if err != nil {
		return nil, err
	}
	if err := e.fit(k); err != nil {
		return nil, fmt.Errorf("client.NewElector: %w", err)
	}
	e.k = k
	return e, nil
}

// NewElector returns an Elector for the lease name whose Run builds the
// default Keeper over c (NewKeeper with the Client's shared session,
// falling back to plain renewals as the Keeper does, and cfg.CancelBefore
// checked against the window) and closes it when Run returns. CancelBefore
// is checked against the Keeper's span when Run has built it.
func (c *Client) NewElector(name string, cfg ElectorConfig) (*Elector, error) {
	if c == nil {
		return nil, errors.New("client.Client.NewElector: Client is nil")
	}
	e, err := newElector(c, name, cfg)
	if err != nil {
		return nil, err
	}
	e.own = true
	return e, nil
}

func newElector(c *Client, name string, cfg ElectorConfig) (*Elector, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("client.NewElector: lease name %q must be 1–128 characters of [A-Za-z0-9._-] starting with a letter or digit", name)
	}
	given, logged := cfg.CancelBefore, cfg.Logger != nil
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("client.NewElector: %w", err)
	}
	return &Elector{c: c, name: name, cfg: cfg, given: given, logged: logged}, nil
}

// fit sets CancelBefore for the Keeper k's span (rule L3): as given, or
// the default, and checked (FitCancelBefore).
func (e *Elector) fit(k *Keeper) error {
	cb, err := cancelBeforeFor(k.Span(), k.DriftMargin(), e.given)
	if err != nil {
		return fmt.Errorf("ElectorConfig.CancelBefore: %w", err)
	}
	e.cfg.CancelBefore = cb
	return nil
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
// of the service's bounds, credentials refused, for instance), when its
// Keeper is closed (ErrKeeperClosed), and when Run is already running; for
// an Elector of Client.NewElector also when its Keeper cannot be built or
// CancelBefore does not fit the Keeper's span (ErrInvalid). A token source
// that fails (ErrCredentials), and a session the service ended (the
// Keeper's Holds fail until it has a new one, or for good with a Session
// given explicitly), are retried like an unreachable service.
func (e *Elector) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("client: Elector.Run: already running")
	}
	defer e.running.Store(false)
	if e.own {
		done, err := e.keep(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("client: elector %q: %w", e.name, err)
		}
		defer done()
	}
	for {
		h, err := e.campaign(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("client: elector %q: %w", e.name, err)
		}
		if done := e.lead(ctx, h); done {
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
	if changed && e.cfg.Callbacks.OnNewLeader != nil {
		e.cfg.Callbacks.OnNewLeader(l.Holder)
	}
}

// permanent reports whether err cannot go away by retrying.
func permanent(err error) bool { return errors.Is(err, ErrInvalid) || errors.Is(err, ErrDenied) }

// sleep waits d on the Keeper's clock; false when ctx ended first.
func (e *Elector) sleep(ctx context.Context, d time.Duration) bool {
	t := e.k.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// campaign acquires the lease through the Elector's Keeper (Keeper.Hold,
// which keeps the holding from then on) and returns the holding.
func (e *Elector) campaign(ctx context.Context) (Holding, error) {
	failures := 0
	// The first acquire, and the first after a failure, does not wait: the
	// answer says at once who leads (OnNewLeader, Leader). The next ones wait
	// on the service for that holding to end.
	wait := false
	for {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		req := AcquireRequest{Holder: e.cfg.Holder, Metadata: e.cfg.Metadata,
			Priority: e.cfg.Priority, Candidate: e.candidate()}
		if wait {
			req.Wait = max(e.cfg.Wait, 0)
			req.Preempt = e.cfg.Preempt && req.Wait > 0
		}
		sent := e.k.cfg.Clock.Now()
		h, err := e.k.Hold(ctx, e.name, req)
		var held *HeldError
		var reserved *ReservedError
		switch {
		case err == nil:
			e.observe(h.Lease())
			// An acquire that waited on the service began its holding well
			// after it was sent: lead on a deadline not mostly spent.
			if h.Fresh(ctx, e.cfg.CancelBefore) {
				return h, nil
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		case ctx.Err() != nil: // the Keeper gave up what the acquire may have taken
			return nil, ctx.Err()
		case errors.As(err, &held):
			failures = 0
			e.observe(held.Lease)
			if e.cfg.Wait > 0 && (!wait || e.k.cfg.Clock.Now().Sub(sent) >= e.cfg.Wait/10) {
				wait = true
				continue // wait on the service now, or again
			}
			// No waiting (or the service answered early): poll.
			if !e.sleep(ctx, e.jittered(e.k.cfg.RenewInterval)) {
				return nil, ctx.Err()
			}
		case errors.As(err, &reserved):
			// Free, but reserved for another for a few seconds: wait on the
			// service (it keeps waiting through the reservation), else poll.
			failures = 0
			if e.cfg.Wait > 0 && (!wait || e.k.cfg.Clock.Now().Sub(sent) >= e.cfg.Wait/10) {
				wait = true
				continue
			}
			if !e.sleep(ctx, e.jittered(min(e.k.cfg.RenewInterval, max(reserved.RetryAfter, time.Millisecond)))) {
				return nil, ctx.Err()
			}
		case permanent(err) || errors.Is(err, ErrKeeperClosed):
			// (A session the service ended is no reason to stop: the
			// Keeper opens a new one, or fails each Hold until it can.)
			return nil, err
		default:
			wait = false
			e.cfg.Logger.Warn("leasesvc elector: acquire failed", "lease", e.name, "holder", e.cfg.Holder, "err", err)
			if !e.sleep(ctx, e.retryDelay(err, failures)) {
				return nil, ctx.Err()
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
	return retryDelay(e.k.cfg.RetryBackoff, err, failures)
}

// jittered returns d less a random part of up to RenewJitter of it.
func (e *Elector) jittered(d time.Duration) time.Duration {
	return d - time.Duration(rand.Float64()*e.k.cfg.RenewJitter*float64(d))
}

// attemptTimeout bounds one renew attempt: a renew that hangs must not use
// up the time left for the next one.
func (e *Elector) attemptTimeout() time.Duration {
	return max(time.Millisecond, min(e.c.cfg.RequestTimeout, e.k.cfg.RenewInterval))
}
