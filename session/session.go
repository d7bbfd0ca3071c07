package session

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// held is one holding of a session, as this instance last wrote it.
type held struct {
	name, holder string
	token        int64
	sent         time.Time // monotonic send time of the last successful write
	// since is the backend time a resume took the holding over at (zero
	// for an acquire): an end of the same token decided no later is an
	// event from before the takeover, delivered late.
	since   time.Time
	ending  bool   // a release, transfer or expiry of this instance is under way
	yieldTo string // the candidate of the last yield pushed
}

// safeUntil is the instance's safe deadline of h (docs/contract.md §14).
func (h *held) safeUntil(ttl time.Duration) time.Time {
	return h.sent.Add(time.Duration(float64(ttl) * safeFraction))
}

// endDecided, when set (tests only), runs once the instance decided to end
// a session, before the writes that end it.
var endDecided atomic.Pointer[func(*Session, endKind)]

// decided runs endDecided, if set.
func decided(s *Session, kind endKind) {
	if f := endDecided.Load(); f != nil {
		(*f)(s, kind)
	}
}

// state is where a session is in its life.
type state int

const (
	live state = iota
	ended
)

// endKind says why a session ends.
type endKind int

const (
	endClosed   endKind = iota // a close message: release everything
	endExpired                 // no message for a window: release everything, session_expired
	endMoved                   // resumed elsewhere: touch nothing
	endShutdown                // the instance stops and the agent neither moved nor heartbeat
	endLapsed                  // the session record ran out: a window after the last ack, as endExpired
)

// Session is one session owned by this instance. Its methods are safe for
// concurrent use.
type Session struct {
	r         *Registry
	key       string
	principal string
	caller    string
	window    time.Duration
	ttl       time.Duration
	recordTTL time.Duration
	clock     Clock
	ctx       context.Context // done when the session ends: in-flight acquires stop
	cancel    context.CancelFunc
	stop      chan struct{} // closed when the session ends: the renew loop stops
	// renewT fires the next renewal round (renewRounds; set once, by
	// startRenewals); kicked asks for a round now (Kick).
	renewT atomic.Pointer[timerBox]
	kicked atomic.Bool

	mu     sync.Mutex
	epoch  int64
	record held
	leases map[string]*held
	// endsSent are the holdings this instance sent an end of (a release,
	// transfer or expiry), by lease: an acquire answering such a holding,
	// decided before the end but answered after it was sent, is never
	// answered as held (docs/contract.md §14, S5).
	endsSent map[string]endSent
	pending  int // acquires under way
	lastRecv time.Time
	conn     Conn
	state    state
	death    Timer
}

// Epoch is the session's ownership epoch on this instance.
func (s *Session) Epoch() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// Window is the session's heartbeat window.
func (s *Session) Window() time.Duration { return s.window }

// TTL is the backend TTL of the session's leases.
func (s *Session) TTL() time.Duration { return s.ttl }

// ShortKey is the first 8 hex characters of the session key, for logs and
// the audit trail.
func (s *Session) ShortKey() string { return s.key[:8] }

// ref is the session's reference for a backend write; s.mu held.
func (s *Session) ref() Ref { return Ref{Key: s.key, Epoch: s.epoch, Window: s.window} }

// Touch records a message received from the agent: the death timer counts
// from the last one.
func (s *Session) Touch() {
	s.mu.Lock()
	s.lastRecv = s.clock.Now()
	s.mu.Unlock()
}

// Heartbeat records a heartbeat and acks it, calling ack under the
// session's lock, only while the session is live here and every lease of
// it is safe on the backend for at least one window beyond now
// (docs/contract.md §14, S2). A lease leaves the session, and its lost
// push is queued, under the same lock: an ack queued after the loss comes
// after the push on the socket. It reports whether it acked.
func (s *Session) Heartbeat(ack func()) bool {
	s.r.observe(func(o Observer) { o.Heartbeat() })
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.lastRecv = now
	if s.state != live {
		return false
	}
	need := now.Add(s.window)
	for _, h := range s.leases {
		if h.safeUntil(s.ttl).Before(need) {
			return false
		}
	}
	ack()
	return true
}

// Attach makes c the socket the session pushes to.
func (s *Session) Attach(c Conn) {
	s.mu.Lock()
	s.conn = c
	s.mu.Unlock()
}

// Detach forgets c if it is the session's socket: the socket closed
// without a close message. The session lives on until its window passes
// without a message (it may be resumed meanwhile).
func (s *Session) Detach(c Conn) {
	s.mu.Lock()
	if s.conn == c {
		s.conn = nil
	}
	s.mu.Unlock()
}

// push sends p to the session's socket, if one is attached.
func (s *Session) push(p Push) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pushLocked(p)
}

// pushLocked queues p on the session's socket, if one is attached; s.mu
// held, so that it is ordered with the acks (Heartbeat).
func (s *Session) pushLocked(p Push) {
	if s.conn != nil {
		s.conn.Push(p)
	}
}

// watchDeath runs when the death timer fires: the session dies when no
// message arrived for a whole window; otherwise the timer is set again.
func (s *Session) watchDeath() {
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
	defer cancel()
	_ = s.endIfIdle(ctx, endExpired)
}

// endIfIdle ends the session (kind endExpired or endShutdown) when no
// message arrived for a whole window, deciding and marking it ended under
// one lock, so that no heartbeat is acked once its death is decided. A
// live session that is not idle gets its death timer set again.
func (s *Session) endIfIdle(ctx context.Context, kind endKind) error {
	s.mu.Lock()
	if s.state != live {
		s.mu.Unlock()
		return ErrClosed
	}
	if idle := since(s.clock, s.lastRecv); idle < s.window {
		s.death.Reset(s.window - idle)
		s.mu.Unlock()
		return nil
	}
	e := s.beginEndLocked()
	s.mu.Unlock()
	return s.finishEnd(ctx, kind, e)
}

// Close ends the session at the agent's request: every lease and the
// session record are released at once.
func (s *Session) Close(ctx context.Context) error { return s.end(ctx, endClosed) }

// end ends the session once; a second call returns ErrClosed.
func (s *Session) end(ctx context.Context, kind endKind) error {
	s.mu.Lock()
	if s.state != live {
		s.mu.Unlock()
		return ErrClosed
	}
	e := s.beginEndLocked()
	s.mu.Unlock()
	return s.finishEnd(ctx, kind, e)
}

// ending is what a session's end writes, taken when it was marked ended.
type ending struct {
	ref  Ref
	hs   []held
	rec  held
	conn Conn
}

// beginEndLocked marks the live session ended (from here on no heartbeat
// is acked, no renewal written) and returns what its end must write; s.mu
// held. finishEnd must follow.
func (s *Session) beginEndLocked() ending {
	s.state = ended
	s.r.beginEnd()
	s.death.Stop()
	close(s.stop)
	if t := s.renewT.Load(); t != nil {
		t.Stop()
	}
	s.cancel()
	e := ending{ref: s.ref(), hs: make([]held, 0, len(s.leases)), rec: s.record, conn: s.conn}
	for _, h := range s.leases {
		h.ending = true
		e.hs = append(e.hs, *h)
	}
	return e
}

// finishEnd writes the end of a session that beginEndLocked marked ended.
func (s *Session) finishEnd(ctx context.Context, kind endKind, e ending) error {
	defer s.r.finishEnd()
	decided(s, kind)
	ref, hs, rec, conn := e.ref, e.hs, e.rec, e.conn
	s.r.unregister(s, hs)

	log := s.r.cfg.Logger.With("session", s.ShortKey())
	moved := func() error {
		s.r.cfg.Audit.Session(ctx, "session_moved", "ok", s.principal, s.ShortKey(), "resumed elsewhere")
		if conn != nil {
			conn.Push(Push{Type: PushEnded, Reason: "the session was resumed elsewhere"})
		}
		return nil
	}
	switch kind {
	case endMoved:
		return moved()
	case endLapsed:
		// The record ran out (docs/contract.md §14 Death): acks stopped
		// when the end began; every heartbeat acked was received before,
		// so a window from now the agent has stopped.
		if conn != nil {
			conn.Push(Push{Type: PushEnded, Reason: "the session record ran out"})
			conn = nil
		}
		if !s.sleep(ctx, s.window) {
			return ctx.Err()
		}
		fallthrough
	case endExpired, endShutdown:
		// One read spares a write per lease when the session moved on.
		if r, err := s.r.b.Get(ctx, rec.name); err == nil && (r.Key != ref.Key || r.Epoch != ref.Epoch) {
			return moved()
		}
	}
	var released int64
	var mu sync.Mutex
	s.r.fanOut(hs, func(h held) {
		req := lease.ReleaseRequest{Name: h.name, Holder: h.holder, FencingToken: h.token, Principal: s.principal}
		var err error
		if kind == endClosed {
			_, err = s.r.b.Release(ctx, ref, req)
		} else {
			_, err = s.r.b.Expire(ctx, ref, req)
		}
		switch {
		case err == nil:
			mu.Lock()
			released++
			mu.Unlock()
		case errors.Is(err, lease.ErrLost):
		default:
			log.Warn("session: ending a lease failed; it runs out at its TTL", "lease", h.name, "err", err)
		}
	})
	if _, err := s.r.b.Release(ctx, ref, lease.ReleaseRequest{Name: rec.name, Holder: rec.holder, FencingToken: rec.token, Principal: s.principal}); err != nil && !errors.Is(err, lease.ErrLost) {
		log.Warn("session: ending the session record failed; it runs out at its TTL", "err", err)
	}
	switch kind {
	case endClosed:
		s.r.cfg.Audit.Session(ctx, "session_close", "ok", s.principal, s.ShortKey(), "")
	default:
		s.r.observe(func(o Observer) { o.ExpiredReleases(released) })
		s.r.cfg.Audit.Session(ctx, "session_expire", "ok", s.principal, s.ShortKey(), "no heartbeat for the window")
		if conn != nil {
			conn.Push(Push{Type: PushEnded, Reason: "the session expired: no message for its window"})
		}
	}
	return nil
}

// sleep waits d on the session's clock, or until ctx is done (false).
func (s *Session) sleep(ctx context.Context, d time.Duration) bool {
	done := make(chan struct{})
	t := s.clock.AfterFunc(d, func() { close(done) })
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
