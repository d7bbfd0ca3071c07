package client

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// holdWith decides how Run holds the lease: through ElectorConfig.Session,
// through the Client's shared session, or with plain renewals (nil) when
// the config asks for them, the service offers no sessions, or it
// refuses to open another (its session limits: asked again on the next
// Run). It logs which. done is called when Run returns.
func (e *Elector) holdWith(ctx context.Context) (s *Session, done func(), err error) {
	noop := func() {}
	e.cfg.CancelBefore = e.plainCancelBefore
	plain := func(why string) (*Session, func(), error) {
		e.cfg.CancelBefore = e.plainCancelBefore
		e.cfg.Logger.Info("leasesvc elector: plain renewals"+why, "lease", e.name, "holder", e.cfg.Holder)
		return nil, noop, nil
	}
	switch {
	case e.cfg.PlainRenewals:
		return plain("")
	case e.cfg.Session != nil:
		if err := e.fitsWindow(e.cfg.Session.Window()); err != nil {
			return nil, nil, err
		}
		e.logSession(e.cfg.Session)
		return e.cfg.Session, noop, nil
	}
	cfg := SessionConfig{DriftMargin: e.cfg.DriftMargin, Logger: e.cfg.Logger, Clock: e.cfg.Clock}
	if e.fitsWindow(DefaultSessionWindow) != nil {
		return plain(fmt.Sprintf(" (CancelBefore %v leaves no room in a session window of %v)", e.cfg.CancelBefore, DefaultSessionWindow))
	}
	for failures := 0; ; failures++ {
		s, done, err := e.c.sharedSession(ctx, cfg, e.cfg.ReleaseTimeout)
		switch {
		case err == nil:
			if e.fitsWindow(s.Window()) != nil {
				done()
				return plain(fmt.Sprintf(" (CancelBefore %v leaves no room in the shared session's window of %v)", e.cfg.CancelBefore, s.Window()))
			}
			e.logSession(s)
			return s, done, nil
		case errors.Is(err, ErrSessionsUnsupported):
			return plain(" (the service offers no sessions)")
		case errors.As(err, new(sessionLimitError)):
			// Not remembered: the next Run asks for a session again.
			return plain(" (the service's session limit is reached)")
		case permanent(err):
			return nil, nil, err
		}
		e.cfg.Logger.Warn("leasesvc elector: opening a session failed", "lease", e.name, "holder", e.cfg.Holder, "err", err)
		if !e.sleep(ctx, e.retryDelay(err, failures)) {
			return nil, nil, ctx.Err()
		}
	}
}

// logSession says that the Elector holds its lease through s.
func (e *Elector) logSession(s *Session) {
	e.cfg.Logger.Info(fmt.Sprintf("leasesvc elector: holding through a session (window %v)", s.Window()),
		"lease", e.name, "holder", e.cfg.Holder)
}

// fitsWindow checks that a term through a session of this window can
// last: its deadline moves with every acknowledged heartbeat (every
// window/4), so CancelBefore must leave room for a missed one. A default
// CancelBefore becomes at most a tenth of the window.
func (e *Elector) fitsWindow(w time.Duration) error {
	if e.cancelBefore == 0 {
		e.cfg.CancelBefore = min(e.plainCancelBefore, w/10)
	}
	if room := safeSpan(w, e.cfg.DriftMargin) - w/2; e.cfg.CancelBefore >= room {
		return fmt.Errorf("ElectorConfig.CancelBefore %v must be below %v for a session window of %v", e.cfg.CancelBefore, room, w)
	}
	return nil
}

// deadline returns the safe deadline of a holding confirmed by a request
// sent at sent: the session's deadline through a session, else sent + TTL
// × (1 − DriftMargin).
func (e *Elector) deadline(sent time.Time) time.Time {
	if e.sess != nil {
		return e.sess.Deadline()
	}
	return sent.Add(e.safe)
}

// awaitSession waits until the session's deadline leaves room to lead the
// holding l: true then; false when the holding was lost meanwhile or ctx
// ended (the holding is then released).
func (e *Elector) awaitSession(ctx context.Context, l Lease) bool {
	s := e.sess
	h := s.holding(l.Name, l.FencingToken)
	if h == nil {
		return false
	}
	for {
		changed := s.deadlineChanged()
		if e.cfg.Clock.Now().Before(s.Deadline().Add(-e.cfg.CancelBefore)) {
			return true
		}
		select {
		case <-changed:
		case <-h.lost:
			return false
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), e.cfg.ReleaseTimeout)
			defer cancel()
			_, _ = s.ReleaseWith(rctx, e.name, ReleaseRequest{Holder: e.cfg.Holder, FencingToken: l.FencingToken})
			return false
		}
	}
}
