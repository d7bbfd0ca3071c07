package session

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// held is one holding of a session, as this instance last wrote it.
type held struct {
	name, holder string
	token        int64
	sent         time.Time // monotonic send time of the last successful write
	// since is the backend time a resume took the holding over at (zero
	// for an acquire): an end of the same token decided no later is an
	// event from before the takeover, delivered late.
	since time.Time
	// lettingGo: a release or transfer of it by this instance is under
	// way (the session's own end is its phase, not this).
	lettingGo bool
	yieldTo   string // the candidate of the last yield pushed
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
	phase    phase   // opening, live, ending, gone (phase.go)
	kind     endKind // why it ends, once ending
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
func (s *Session) Touch() { s.event(context.Background(), event{kind: evMessage}) }

// event steps the session by ev under its lock and carries out what the
// step does after it.
func (s *Session) event(ctx context.Context, ev event) (effects, error) {
	s.mu.Lock()
	eff := s.step(ev)
	s.mu.Unlock()
	return eff, s.carryOut(ctx, eff)
}

// Heartbeat records a heartbeat and acks it, calling ack under the
// session's lock, only while the session is live here and every lease of
// it is safe on the backend for at least one window beyond now
// (docs/contract.md §14, S2). A lease leaves the session, and its lost
// push is queued, under the same lock: an ack queued after the loss comes
// after the push on the socket. It reports whether it acked.
func (s *Session) Heartbeat(ack func()) bool {
	eff, _ := s.event(context.Background(), event{kind: evHeartbeat, queue: ack})
	return eff.do.has(effAck)
}

// Attach makes c the socket the session pushes to.
func (s *Session) Attach(c Conn) { s.event(context.Background(), event{kind: evAttached, conn: c}) }

// Detach forgets c if it is the session's socket: the socket closed
// without a close message. The session lives on until its window passes
// without a message (it may be resumed meanwhile).
func (s *Session) Detach(c Conn) {
	s.event(context.Background(), event{kind: evSocketDropped, conn: c})
}

// pushLocked queues p on the session's socket, if one is attached; s.mu
// held, so that it is ordered with the acks (Heartbeat).
func (s *Session) pushLocked(p Push) {
	if s.conn != nil {
		s.conn.Push(p)
	}
}

// Move asks the session's socket to move (max age).
func (s *Session) Move(reason string) {
	s.event(context.Background(), event{kind: evMoveAsked, push: &Push{Type: PushMove, Reason: reason}})
}

// watchDeath runs when the death timer fires: the session dies when no
// message arrived for a whole window; otherwise the timer is set again.
func (s *Session) watchDeath() {
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
	defer cancel()
	_, _ = s.event(ctx, event{kind: evDeathTimer})
}

// Close ends the session at the agent's request: every lease and the
// session record are released at once.
func (s *Session) Close(ctx context.Context) error {
	_, err := s.event(ctx, event{kind: evClose})
	return err
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
