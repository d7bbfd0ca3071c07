package client

import (
	"errors"
	"time"

	"github.com/coder/websocket"
)

// supervise heartbeats and keeps the session connected until Close.
func (s *Session) supervise() {
	defer s.wg.Done()
	hb := s.cfg.Clock.NewTimer(0)
	defer hb.Stop()
	interval := func() time.Duration {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.heartbeat
	}
	for {
		select {
		case <-s.ctx.Done():
			if sc := s.current(); sc != nil {
				_ = sc.ws.CloseNow()
			}
			return
		case <-hb.C():
			s.beat()
			hb.Reset(interval())
		case sc := <-s.dead:
			if s.current() != sc {
				continue
			}
			s.setConn(nil)
			s.cfg.Logger.Warn("leasesvc session: socket dropped; reconnecting", "err", sc.err)
			s.reconnect()
			hb.Reset(0)
		case sc := <-s.moves:
			if s.current() != sc {
				continue
			}
			s.move(sc)
			hb.Reset(0)
		}
	}
}

// reconnect resumes the session on a new socket (any instance), retrying
// with backoff until Close; a first session_conflict is resumed again at
// once, above the epoch it names. When the service says the session
// ended, the Session ends (resume).
func (s *Session) reconnect() {
	failures, conflicted := 0, false
	for attempt := 1; ; attempt++ {
		if failures > 0 {
			t := s.cfg.Clock.NewTimer(s.c.cfg.Backoff.Delay(failures - 1))
			select {
			case <-s.ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
		if s.ctx.Err() != nil {
			return
		}
		sc, err := s.resume()
		if err == nil {
			s.setConn(sc)
			return
		}
		if errors.Is(err, ErrSessionEnded) {
			return
		}
		s.cfg.Logger.Warn("leasesvc session: reconnect failed", "attempt", attempt, "err", err)
		if isConflict(err) && !conflicted {
			// The session is at the epoch proposed or above: resume again
			// at once, above it (docs/contract.md §14, A1).
			conflicted = true
			continue
		}
		failures++
	}
}

// resume resumes the session on a new socket. When the service says the
// session ended, the Session ends for good (rule L2): its holdings are
// lost, and it is not reopened.
func (s *Session) resume() (*sconn, error) {
	sc, err := s.connect(s.ctx, true)
	if err == nil {
		s.cfg.Logger.Info("leasesvc session: resumed")
		return sc, nil
	}
	if !sessionGone(err) {
		return nil, err
	}
	s.cfg.Logger.Warn("leasesvc session: the service ended the session; its leases are lost", "err", err)
	s.mu.Lock()
	s.endLocked(err)
	s.mu.Unlock()
	s.cancel()
	return nil, s.closedErr()
}

// sessionGone reports whether a resume's refusal says the session cannot
// be resumed: it ended. A session_conflict is no end: the session is at
// the epoch proposed or above, and the next resume proposes above it.
func sessionGone(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == "session_not_found"
}

// isConflict reports whether err is a resume's 409 session_conflict.
func isConflict(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == "session_conflict"
}

// move resumes the session on a new socket, then closes old without a
// close message (make before break).
func (s *Session) move(old *sconn) {
	sc, err := s.resume()
	if err != nil {
		s.mu.Lock()
		sent := !old.retiredAt.IsZero()
		s.mu.Unlock()
		if !sent {
			// No resume reached the service (the dial failed): the old
			// socket still owns the session.
			s.cfg.Logger.Warn("leasesvc session: move failed; staying until the socket closes", "err", err)
			return
		}
		// The resume was sent but its outcome is unknown: its instance may
		// own the session now, so the old socket's acks vouch for nothing.
		// Drop it; the session resumes again (supervise sees it dead).
		s.cfg.Logger.Warn("leasesvc session: move failed after the resume was sent; reconnecting", "err", err)
		_ = old.ws.CloseNow()
		return
	}
	if !s.setConn(sc) {
		return
	}
	s.cfg.Logger.Info("leasesvc session: moved")
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = old.ws.Close(websocket.StatusNormalClosure, "moved")
	}()
}
