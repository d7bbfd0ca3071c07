package client

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Acquire takes the lease through the session, as Client.Acquire does
// (req.TTL is ignored: the service holds session leases at its session
// lease TTL and ends them with the session). The holding is the
// session's until it is released, transferred or lost. When ctx ends
// before the answer, a holding the answer gives is released.
func (s *Session) Acquire(ctx context.Context, name string, req AcquireRequest) (Lease, error) {
	m := outMsg{Type: "acquire", Name: name, Holder: req.Holder, Metadata: req.Metadata,
		WaitMs: max(req.Wait, 0).Milliseconds(), Preempt: req.Preempt}
	if req.Priority != 0 || req.Candidate || req.Preempt {
		m.Priority = &req.Priority
	}
	wait := req.Wait
	var prev *Lease // the last answer that came unvouched, and its socket
	var prevSc *sconn
	for {
		l, sc, unvouched, err := s.leaseCall(ctx, m, wait)
		if err != nil {
			if prev != nil {
				s.releaseAbandoned(prevSc, *prev)
			}
			return Lease{}, fmt.Errorf("leasesvc session acquire %q: %w", name, err)
		}
		if prev != nil && prev.FencingToken != l.FencingToken {
			s.dropHolding(prev.Name, prev.FencingToken, nil) // it ended meanwhile
		}
		if !unvouched {
			return l, nil
		}
		// A resume began after the socket that answered became current:
		// that resume did not claim the holding, so the acks of the
		// socket it opened do not vouch for it. Acquire it again through
		// the current socket: the same holder through the same session at
		// a later epoch takes it over with its token (docs/contract.md
		// §14, Resume); until that answer nothing leads it.
		s.cfg.Logger.Info("leasesvc session: an acquire was answered during a resume; acquiring again through the new socket",
			"lease", name, "fencingToken", l.FencingToken)
		prev, prevSc = &l, sc
		m.WaitMs, wait = 0, 0
	}
}

// Renew writes metadata or a checkpoint of a holding of the session
// (the service renews session leases itself).
func (s *Session) Renew(ctx context.Context, name string, req RenewRequest) (Lease, error) {
	l, _, _, err := s.leaseCall(ctx, outMsg{Type: "renew", Name: name, Holder: req.Holder, FencingToken: req.FencingToken,
		Metadata: req.Metadata, Checkpoint: req.Checkpoint}, 0)
	if err != nil {
		return Lease{}, fmt.Errorf("leasesvc session renew %q: %w", name, err)
	}
	return l, nil
}

// ReleaseWith ends a holding of the session now, writing req.Checkpoint,
// if any, as Client.ReleaseWith does. A release left unanswered because
// its socket dropped, or answered 503 (the session ended on that socket),
// leaves the holding to the session: the next resume claims it, and the
// release goes again through the resumed socket (docs/contract.md §14,
// step 6). It returns ErrLost when that resume reports the holding lost.
// Given up (ctx, or Config.RequestTimeout waiting for a socket or an
// answer) with its outcome unknown, the holding is forgotten (no resume
// claims it again) and released once more in the background.
func (s *Session) ReleaseWith(ctx context.Context, name string, req ReleaseRequest) (Lease, error) {
	l, err := s.letGo(ctx, outMsg{Type: "release", Name: name, Holder: req.Holder, FencingToken: req.FencingToken,
		Checkpoint: req.Checkpoint})
	if err != nil {
		return Lease{}, fmt.Errorf("leasesvc session release %q: %w", name, err)
	}
	return l, nil
}

// Transfer hands a holding of the session over to req.To, as
// Client.Transfer does; a transfer whose socket dropped before the answer,
// or answered 503, goes again through the resumed socket, as ReleaseWith
// does.
func (s *Session) Transfer(ctx context.Context, name string, req TransferRequest) (Lease, error) {
	l, err := s.letGo(ctx, outMsg{Type: "transfer", Name: name, Holder: req.Holder, FencingToken: req.FencingToken,
		To: req.To, ToPrincipal: req.ToPrincipal, Checkpoint: req.Checkpoint, ReserveMs: req.Reserve.Milliseconds()})
	if err != nil {
		return Lease{}, fmt.Errorf("leasesvc session transfer %q: %w", name, err)
	}
	return l, nil
}

// errHoldingGone is socketAfter's: the holding left the table meanwhile
// (a resume reported it lost, the session ended, or Close).
var errHoldingGone = errors.New("the holding left the session")

// letGo sends m, a release or transfer of a holding of the session, until
// an answer settles it (docs/contract.md §14, step 6):
//
//   - a result on a socket no resume has retired settles it: the holding
//     was forgotten when the answer was read (Session.settle), before any
//     later resume could list it;
//   - a result on a retired socket: the resume that retired it listed the
//     holding and may have taken it back (a holding that ended while
//     nobody acquired since is restarted), so m goes again through the
//     socket of that resume; its lease_lost, or the holding lost on the
//     resume, leaves the first result standing;
//   - no answer because the socket dropped, or 503 unavailable (the
//     session ended on that socket): the holding stays in the table, the
//     next resume claims it, and m goes again through its socket (or, a 503
//     on a socket that stays, on the same one after Retry-After); the
//     holding lost on the resume ends the call with ErrLost.
//
// m is sent at most max(Config.MaxAttempts, 2) times. Each wait for a
// socket and for an answer is bounded by ctx and Config.RequestTimeout;
// given up with the outcome unknown, the holding is forgotten and released
// in the background (Session.giveUp). Any other refusal is returned as it
// is, the holding kept.
func (s *Session) letGo(ctx context.Context, m outMsg) (l Lease, err error) {
	h := s.holding(m.Name, m.FencingToken)
	// From the moment the release or transfer goes out, the holding is
	// not led: the instance may end it any time after, and no ack says
	// when (docs/contract.md §14, case 7). Only a refusal of the request
	// itself (invalid, denied, rate limited: nothing was written) gives
	// the lead back.
	s.letGoing(h, true)
	defer func() {
		if err != nil && (errors.Is(err, ErrInvalid) || errors.Is(err, ErrPermissionDenied) || errors.Is(err, ErrRateLimited)) {
			s.letGoing(h, false)
		}
	}()
	var done *Lease       // a result on a retired socket
	var prev *sconn       // the socket of the last attempt
	var retryAt time.Time // set: prev may take the next attempt from then
	limit := max(s.c.cfg.MaxAttempts, 2)
	for sent := 0; ; {
		cctx, cancel := context.WithTimeout(ctx, s.c.cfg.RequestTimeout)
		sc, err := s.socketAfter(cctx, h, prev, retryAt)
		var in inMsg
		if err == nil {
			sent++
			in, err = s.call(cctx, sc, m)
		}
		cancel()
		if err == nil && in.Lease == nil {
			err = &Error{kind: ErrInternal, Err: fmt.Errorf("a %q answer without a lease", in.Type)}
		}
		var e *Error
		unavailable := errors.As(err, &e) && e.Status == 503 && e.Code == "unavailable"
		again := err == nil || unavailable || errors.Is(err, errSocketClosed)
		switch {
		case err == nil && (!in.unvouched || h == nil):
			return *in.Lease, nil
		case errors.Is(err, ErrSessionClosed):
			return Lease{}, err
		case errors.Is(err, errHoldingGone):
			if done != nil {
				return *done, nil
			}
			return Lease{}, h.lostErr
		case done != nil && errors.Is(err, ErrLost):
			s.dropHolding(h.name, h.token, nil)
			return *done, nil
		case h != nil && again && sent < limit:
			prev, retryAt = sc, time.Time{}
			if err == nil {
				done = in.Lease
				s.cfg.Logger.Info("leasesvc session: a "+m.Type+" was answered on a socket a resume replaced; sending it again through the resumed socket",
					"lease", m.Name, "fencingToken", m.FencingToken)
				continue
			}
			if unavailable {
				retryAt = s.cfg.Clock.Now().Add(max(e.RetryAfter, sessionRetryAfter))
			}
			s.cfg.Logger.Info("leasesvc session: a "+m.Type+" went unanswered, or found the session ended on its socket; sending it again through the resumed socket",
				"lease", m.Name, "fencingToken", m.FencingToken, "err", err)
			continue
		}
		if err == nil { // out of attempts, answered only on retired sockets
			done = in.Lease
			err = errors.New("answered only on sockets a resume replaced")
		}
		unsettled := again || errors.Is(err, ErrUnavailable) && e != nil && e.Status == 0
		if h != nil && (done != nil || unsettled && (sent > 0 || m.Type == "release")) {
			// Nothing settled it: whether the holding ended is unknown,
			// or (a release never sent) the caller lets it go all the same.
			s.giveUp(h, m.Type, err)
			if done != nil {
				return *done, nil
			}
			return Lease{}, &Error{kind: ErrUnavailable, Err: fmt.Errorf("not settled through the session (%w); the holding is forgotten and released in the background", err)}
		}
		return Lease{}, err
	}
}

// socketAfter returns the socket for the next attempt of a release or
// transfer: the current one, once it is not prev (a later socket, whose
// resume listed the holding: it was in the table until the answer that
// settles it), or prev itself from retryAt on, while it lives. It fails
// with errHoldingGone when h (if not nil) leaves the table meanwhile.
func (s *Session) socketAfter(ctx context.Context, h *sessionHolding, prev *sconn, retryAt time.Time) (*sconn, error) {
	var due <-chan time.Time
	if prev != nil && !retryAt.IsZero() {
		t := s.cfg.Clock.NewTimer(retryAt.Sub(s.cfg.Clock.Now()))
		defer t.Stop()
		due = t.C()
	}
	again := false // prev may take it
	var lost <-chan struct{}
	if h != nil {
		lost = h.lost
	}
	for {
		s.mu.Lock()
		sc, closed, connected, swapped := s.conn, s.closed, s.connected, s.swapped
		usable := sc != nil && sc.retiredAt.IsZero() && (sc != prev || again && !sc.isDead())
		s.mu.Unlock()
		select {
		case <-lost:
			return nil, errHoldingGone
		default:
		}
		switch {
		case closed:
			return nil, s.closedErr()
		case usable:
			return sc, nil
		case sc != nil:
			connected = swapped
		}
		select {
		case <-connected:
		case <-lost:
		case <-due:
			again, due = true, nil
		case <-ctx.Done():
			return nil, &Error{kind: ErrUnavailable, Err: fmt.Errorf("no resumed socket to send it on: %w", context.Cause(ctx))}
		case <-s.ctx.Done():
			return nil, s.closedErr()
		}
	}
}

// giveUp forgets a holding whose release or transfer op was given up
// unsettled (cause), so that no resume claims it again: what still holds
// it then ends at the session's next resume or end, and runs out at the
// session lease TTL. It is released once more in the background.
func (s *Session) giveUp(h *sessionHolding, op string, cause error) {
	s.cfg.Logger.Warn("leasesvc session: a "+op+" was not settled; forgetting the holding and releasing it in the background",
		"lease", h.name, "fencingToken", h.token, "err", cause)
	s.dropHolding(h.name, h.token, fmt.Errorf("%w: the holding was given up: a %s of it was not settled: %w", ErrLost, op, cause))
	s.releaseAbandoned(nil, Lease{Name: h.name, Holder: h.holder, FencingToken: h.token})
}

// leaseCall sends a lease request on the current socket and waits for its
// result, at most RequestTimeout + wait. It returns the socket that
// answered and, for an acquire, whether its answer came after a resume
// began elsewhere (Session.addHolding).
func (s *Session) leaseCall(ctx context.Context, m outMsg, wait time.Duration) (l Lease, sc *sconn, unvouched bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, s.c.cfg.RequestTimeout+max(wait, 0))
	defer cancel()
	sc, err = s.socket(cctx)
	if err != nil {
		return Lease{}, nil, false, err
	}
	in, err := s.call(cctx, sc, m)
	if err != nil {
		if ctx.Err() != nil {
			return Lease{}, sc, false, context.Cause(ctx)
		}
		return Lease{}, sc, false, err
	}
	if in.Lease == nil {
		return Lease{}, sc, false, &Error{kind: ErrInternal, Err: fmt.Errorf("a %q answer without a lease", in.Type)}
	}
	return *in.Lease, sc, in.unvouched, nil
}

// socket returns the current socket, waiting (until ctx ends) while the
// session reconnects, or while it resumes on a new socket after the
// current one (sconn.retiredAt).
func (s *Session) socket(ctx context.Context) (*sconn, error) {
	for {
		s.mu.Lock()
		sc, closed, connected, swapped := s.conn, s.closed, s.connected, s.swapped
		retired := sc != nil && !sc.retiredAt.IsZero()
		s.mu.Unlock()
		switch {
		case closed:
			return nil, s.closedErr()
		case sc != nil && !retired:
			return sc, nil
		case retired:
			connected = swapped
		}
		select {
		case <-connected:
		case <-ctx.Done():
			return nil, &Error{kind: ErrUnavailable, Err: fmt.Errorf("the session is reconnecting: %w", context.Cause(ctx))}
		case <-s.ctx.Done():
			return nil, s.closedErr()
		}
	}
}
