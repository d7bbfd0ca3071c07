package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// Resume takes the session id over on this instance for principal at
// exactly epoch, the epoch the agent proposes (docs/contract.md §14, A1 and
// S1): first the session record, whose stored epoch must be lower, then
// each claimed lease, likewise. A record or a claimed lease found at epoch
// or above means a later resume of the agent owns the session: a
// *ConflictError (ErrConflict), and nothing is registered. It returns the
// leases taken over and those that were lost, with the reasons the failed
// takeovers found. window 0 keeps the session's.
//
// The answer, made by answer (nil: none), is queued as the session
// attaches to c, before anything else about it can be (S6); a lease whose
// takeover was answered too late is written once more first, and one not
// safe for a window beyond that moment even then is answered lost
// (expired) and ended (S5).
func (r *Registry) Resume(ctx context.Context, caller, principal, id string, epoch int64, window time.Duration, claims []Claim, c Conn, answer ResumeAnswer) (*Session, []lease.Lease, []Lost, error) {
	return r.resume(ctx, nil, caller, principal, id, epoch, window, claims, c, answer)
}

// ResumeAnswer makes the answer to a resume of s that took leases over,
// outside the session's lock (it may sign proofs), and returns what
// queues it with the leases and losses finally answered; that runs under
// the session's lock as the session attaches to its socket.
type ResumeAnswer func(s *Session, taken []lease.Lease) (queue func(leases []lease.Lease, lost []Lost))

// MaxEpochJump is how far above the session's epoch a resume may propose
// (docs/contract.md §14, Operations in flight): a session can always be
// resumed again, below lease.MaxToken.
const MaxEpochJump = 1_000_000

// EpochError is a resume proposing an epoch more than MaxEpochJump above
// the session's, or above lease.MaxToken (400 invalid_argument).
type EpochError struct{ Max int64 }

func (e *EpochError) Error() string {
	return fmt.Sprintf("session: the proposed epoch must be at most %d", e.Max)
}

// resume is Resume, on the socket's slot sl when it is not nil.
func (r *Registry) resume(ctx context.Context, sl *Slot, caller, principal, id string, epoch int64, window time.Duration, claims []Claim, c Conn, answer ResumeAnswer) (*Session, []lease.Lease, []Lost, error) {
	fail := func(err error) (*Session, []lease.Lease, []Lost, error) {
		r.refused(ctx, "session_resume", principal, "", err)
		return nil, nil, nil, err
	}
	if window != 0 {
		if err := CheckWindow(window); err != nil {
			return nil, nil, nil, err
		}
	}
	if len(claims) > r.cfg.MaxLeases {
		return fail(&LimitError{What: "leases of this session", Max: r.cfg.MaxLeases})
	}
	if !validID(id) {
		return fail(ErrNotFound)
	}
	key := Key(id)
	rec, err := r.b.Get(ctx, RecordName(key))
	switch {
	case errors.Is(err, lease.ErrNotFound):
		return fail(ErrNotFound)
	case err != nil:
		return nil, nil, nil, fmt.Errorf("session: reading the session record: %w", err)
	}
	l := rec.Lease
	if rec.Key != key || l.Holder != recordHolder || l.Principal != principal || l.Revoked() || l.Released() {
		return fail(ErrNotFound)
	}
	if epoch <= rec.Epoch {
		return fail(&ConflictError{Epoch: rec.Epoch})
	}
	if limit := min(rec.Epoch+MaxEpochJump, lease.MaxToken); epoch > limit {
		return fail(&EpochError{Max: limit})
	}
	if window == 0 {
		window = rec.Window
		if CheckWindow(window) != nil {
			window = DefaultWindow
		}
	}
	if err := r.reserve(sl, caller, key); err != nil {
		return fail(err)
	}
	s := r.newSession(key, principal, caller, window, epoch)
	ref := s.ref()
	sent := s.clock.Now()
	got, err := r.b.TakeOver(ctx, ref, TakeOver{Name: l.Name, Holder: recordHolder, Principal: principal, FencingToken: l.FencingToken, TTL: s.recordTTL})
	if err != nil {
		s.refuse()
		var le *lease.LostError
		switch {
		case errors.As(err, &le) && le.Reason == lease.LostMoved:
			return fail(&ConflictError{Epoch: le.Epoch})
		case errors.Is(err, lease.ErrLost):
			return fail(ErrNotFound) // released, revoked or taken since the read
		}
		return nil, nil, nil, fmt.Errorf("session: taking the session record over: %w", err)
	}
	s.record = held{name: got.Name, holder: got.Holder, token: got.FencingToken, sent: sent}
	if window != rec.Window {
		// The record's metadata tells the window: write the new one. The
		// session's window on the backend is already the new one (the
		// takeover wrote it), so a failure here only leaves the metadata
		// stale.
		md, _ := json.Marshal(map[string]int64{"windowMs": window.Milliseconds()})
		sent := s.clock.Now()
		if _, err := r.b.Renew(ctx, ref, lease.RenewRequest{Name: got.Name, Holder: got.Holder, FencingToken: got.FencingToken, TTL: s.recordTTL, Principal: principal, Metadata: md}); err == nil {
			s.record.sent = sent
		} else {
			r.cfg.Logger.Warn("session: resume could not write the session record's window", "session", s.ShortKey(), "err", err)
		}
	}
	taken := make([]lease.Lease, len(claims))
	errs := make([]error, len(claims))
	sent = s.clock.Now()
	r.fanOutIdx(len(claims), func(i int) {
		cl := claims[i]
		taken[i], errs[i] = r.b.TakeOver(ctx, ref, TakeOver{Name: cl.Name, Holder: cl.Holder, Principal: principal, FencingToken: cl.FencingToken, TTL: s.ttl})
	})
	var leases []lease.Lease
	var lost []Lost
	for i, cl := range claims {
		var le *lease.LostError
		switch {
		case errs[i] == nil:
			leases = append(leases, taken[i])
			s.leases[cl.Name] = &held{name: cl.Name, holder: cl.Holder, token: taken[i].FencingToken, sent: sent, since: taken[i].RenewTime}
		case errors.As(errs[i], &le) && le.Reason == lease.LostMoved:
			// A later resume took this lease: it owns the session.
			s.refuse()
			return fail(&ConflictError{Epoch: le.Epoch})
		case le != nil:
			lost = append(lost, Lost{Name: cl.Name, FencingToken: cl.FencingToken, Reason: le.Reason})
		default:
			if !errors.Is(errs[i], lease.ErrLost) {
				r.cfg.Logger.Warn("session: resume could not take a lease over", "session", s.ShortKey(), "lease", cl.Name, "err", errs[i])
			}
			lost = append(lost, Lost{Name: cl.Name, FencingToken: cl.FencingToken, Reason: LostExpired})
		}
	}
	if leases, err = r.safeAnswers(ctx, s, ref, leases, &lost); err != nil {
		s.refuse()
		return fail(err)
	}
	var queue func([]lease.Lease, []Lost)
	if answer != nil {
		queue = answer(s, leases)
	}
	var unsafe []lease.Lease
	attach := func() { // s.mu held, s still opening: the last check of S5, and the answer (S6)
		now := s.clock.Now()
		ok := leases[:0:0]
		for _, l := range leases {
			h := s.leases[l.Name]
			if h != nil && s.safeFor(h.sent, now) {
				ok = append(ok, l)
				continue
			}
			if h != nil {
				s.step(event{kind: evLeaseLost, h: h}) // opening: it leaves the table; the answer lists it
			}
			unsafe = append(unsafe, l)
			lost = append(lost, Lost{Name: l.Name, FencingToken: l.FencingToken, Reason: LostExpired})
		}
		leases = ok
		if queue != nil {
			queue(leases, lost)
		}
	}
	if err := r.register(s, c, attach); err != nil {
		s.refuse()
		return fail(err)
	}
	for _, l := range unsafe {
		s.expireUnanswered(ctx, ref, l)
	}
	r.observe(func(o Observer) { o.Resume() })
	r.cfg.Audit.Session(ctx, "session_resume", "ok", principal, s.ShortKey(), "")
	return s, leases, lost, nil
}

// refuse drops an opening session that will not register (evRefused):
// its slot is given back.
func (s *Session) refuse() { _, _ = s.event(context.Background(), event{kind: evRefused}) }
