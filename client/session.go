package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// ErrSessionsUnsupported is returned by OpenSession when the service does
// not offer sessions (its session route answers 404, 405 or 501): hold
// leases with plain renewals instead. An Elector does so by itself.
var ErrSessionsUnsupported = errors.New("client: the service does not offer sessions")

// sessionLimitError is a 429 resource_exhausted answered to open (or to
// its upgrade, with limit "sessions"): the
// service holds as many sessions as LEASESVC_MAX_SESSIONS or
// LEASESVC_MAX_SESSIONS_PER_CALLER allow (docs/contract.md §14). It
// matches ErrRateLimited; an Elector falls back to plain renewals on it
// (any other 429 before the upgrade is the caller's rate limit, and is
// retried).
type sessionLimitError struct{ error }

// Unwrap returns the refusal.
func (e sessionLimitError) Unwrap() error { return e.error }

// slotRefusal is a 429 answered to the upgrade at a cap of sessions, the
// problem's limit member "sessions" (docs/contract.md §14 Limits): an open
// refused so is a sessionLimitError, a resume's is retried.
type slotRefusal struct{ error }

// Unwrap returns the refusal.
func (e slotRefusal) Unwrap() error { return e.error }

// sessionsCapped reports whether a problem body names the sessions cap.
func sessionsCapped(raw []byte) bool {
	var p struct {
		Limit string `json:"limit"`
	}
	return json.Unmarshal(raw, &p) == nil && p.Limit == "sessions"
}

// Is makes a session limit's refusal match ErrSessionLimit.
func (e sessionLimitError) Is(target error) bool { return target == ErrSessionLimit }

// ErrSessionLimit matches the error of OpenSession when the service refused
// the session at its limit of sessions per instance or per caller (429
// resource_exhausted answered to open, docs/contract.md §14). It also
// matches ErrRateLimited. A program that can lead without a session holds
// its leases with plain renewals then, as an Elector does by itself.
var ErrSessionLimit = errors.New("client: the service's session limit is reached")

// ErrSessionClosed is the error of a request on a Session after Close, and
// the loss of every holding the Session still had then.
var ErrSessionClosed = errors.New("client: session closed")

// ErrSessionEnded is the error of a request on a Session the service ended
// (it expired: nothing heard from it for its window, or its record ran out;
// a resume refused because the session no longer exists). It matches
// ErrSessionClosed. A Session so ended never reopens itself; its holdings
// ended with ErrLost (rule L2 of the SDKs' lifecycle), and a Keeper that
// opened it opens a new one.
var ErrSessionEnded = fmt.Errorf("%w: the service ended the session", ErrSessionClosed)

// SessionConfig configures a Session (OpenSession).
type SessionConfig struct {
	// Window is the session's heartbeat window, whole milliseconds, 200ms …
	// 60s: the service ends the session, and releases its leases, when it
	// has heard nothing from it for that long (docs/contract.md §14). The
	// Session heartbeats every Window/4. Default 1s.
	Window time.Duration
	// DriftMargin is the fraction of the window given up to the difference
	// between the local clock's rate and the service's, 0.01 … 0.5: the
	// session's deadline is the send time of the last acknowledged
	// heartbeat + Window × (1 − DriftMargin). Default 0.1.
	DriftMargin float64
	// Logger receives a line for every reconnection, move and loss.
	// Default: no logging.
	Logger *slog.Logger
	// Clock is the source of local time for heartbeats and the deadline.
	// Default SystemClock{}.
	Clock Clock
}

// Limits and defaults of SessionConfig.
const (
	// DefaultSessionWindow is the heartbeat window of a session.
	DefaultSessionWindow = time.Second
	// MinSessionWindow and MaxSessionWindow bound SessionConfig.Window.
	MinSessionWindow = 200 * time.Millisecond
	MaxSessionWindow = 60 * time.Second
	// sessionProtocol is the WebSocket subprotocol of sessions: v2, whose
	// resumes propose their epoch (docs/contract.md §14, Transport and A1).
	sessionProtocol = "leasesvc.session.v2"
	// sessionPath is the session route.
	sessionPath = "/v1/sessions:connect"
	// sessionSilentWindows and sessionSilentMin are the silent-socket rule
	// (docs/contract.md §14, A3): a socket on which nothing arrived for
	// sessionSilentWindows windows, and at least sessionSilentMin, while
	// heartbeats went out is replaced (a paused instance or a half-open
	// connection would otherwise keep the session on it until TCP gives up).
	sessionSilentWindows = 4
	sessionSilentMin     = 5 * time.Second
	// sessionRetryAfter is the Retry-After of a 503 answered to a lease
	// operation (docs/contract.md §14): a release or transfer answered so
	// on a socket that stays goes again on it after this long.
	sessionRetryAfter = time.Second
)

// silentLimit is how long nothing may arrive on a socket of a session of
// this window while heartbeats go out before the socket is replaced.
func silentLimit(window time.Duration) time.Duration {
	return max(sessionSilentWindows*window, sessionSilentMin)
}

// withDefaults fills the defaults into a copy of cfg and checks it.
func (cfg SessionConfig) withDefaults() (SessionConfig, error) {
	if cfg.Window == 0 {
		cfg.Window = DefaultSessionWindow
	}
	if cfg.Window < MinSessionWindow || cfg.Window > MaxSessionWindow || cfg.Window%time.Millisecond != 0 {
		return cfg, fmt.Errorf("SessionConfig.Window %v must be whole milliseconds within %v … %v", cfg.Window, MinSessionWindow, MaxSessionWindow)
	}
	if cfg.DriftMargin == 0 {
		cfg.DriftMargin = DefaultDriftMargin
	}
	if cfg.DriftMargin < 0.01 || cfg.DriftMargin > 0.5 {
		return cfg, fmt.Errorf("SessionConfig.DriftMargin %v must be within 0.01 … 0.5", cfg.DriftMargin)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	return cfg, nil
}

// Session holds leases through one WebSocket to the service
// (docs/contract.md §14): it heartbeats every window/4, and the service
// ends every lease of the session within a window of its last heartbeat,
// so that a crashed agent's leases free within a window rather than a TTL.
// The service renews the session's leases itself; the agent learns at
// once (over the socket) when one is lost, revoked or asked to yield.
//
// Deadline is the session's safe deadline: the local monotonic send time
// of the last heartbeat the service acknowledged + window × (1 −
// DriftMargin). The service acknowledges a heartbeat only while every
// lease of the session is safe on the backend for a window beyond it, and
// ends the session only a full window after the last heartbeat it
// received, so nothing may act on a lease of the session after Deadline,
// whatever the socket says; an Elector ends its term there.
//
// A dropped socket is not a dead session: the Session reconnects (to any
// instance) and resumes, with the leases it holds. Asked to move (an
// instance shutting down, or its request timeout near), it opens a new
// socket and resumes there before it closes the old one. A socket on which
// nothing arrived for 4 windows (at least 5s) while heartbeats went out is
// replaced the same way. Each resume proposes an epoch above every epoch
// the session saw or proposed (a 409 session_conflict is resumed again,
// higher); once a resume is sent, the older sockets are retired: nothing
// more goes on them, and their pushes and acks count for nothing (the
// resume says what is still held). A Session is one-shot: a resume that
// the service refuses because the session ended (it expired, or its
// record ran out) ends it for good, every holding lost (ErrLost); it never
// reopens itself (Done, Err, ErrSessionEnded): a Keeper that opened it
// opens a new one. A Session is safe for concurrent use.
type Session struct {
	c   *Client
	cfg SessionConfig
	ids atomic.Int64 // request ids: unique and increasing on every socket

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	dead   chan *sconn // sockets whose reader stopped
	moves  chan *sconn // sockets the service asked to leave

	mu   sync.Mutex
	conn *sconn // the socket requests go on; nil while reconnecting
	// latest is the socket on which open or resume was last sent: the
	// current socket of docs/contract.md §14 (A2). Once a resume goes out
	// on it, every earlier socket is retired (sconn.retiredAt): its pushes
	// and its answer to an open or resume are ignored. conn becomes latest
	// when its answer arrives.
	latest *sconn
	// epoch is the highest epoch the session has seen (opened, resumed, a
	// session_conflict) or proposed: the next resume proposes epoch + 1
	// (docs/contract.md §14, A1).
	epoch     int64
	connected chan struct{} // closed while conn is not nil
	swapped   chan struct{} // closed and replaced when conn changes
	id        string        // the session id (a bearer secret: never logged)
	window    time.Duration
	heartbeat time.Duration
	leaseTTL  time.Duration
	ackedSent time.Time     // send time of the last acknowledged heartbeat
	changed   chan struct{} // closed and replaced when the deadline moves
	holdings  map[holdingKey]*sessionHolding
	closed    bool  // by Close, or the service ended it
	endErr    error // why it ended: ErrSessionClosed, or ErrSessionEnded
}

// holdingKey names a holding: a fencing token is never reused by a lease.
type holdingKey struct {
	name  string
	token int64
}

// sessionHolding is a lease the session holds, and what the service said
// of it.
type sessionHolding struct {
	name, holder string
	token        int64
	lost         chan struct{} // closed when the holding is gone
	lostErr      error         // why; set before lost is closed
	yield        chan string   // a preempting candidate asks for the lease
	// vouched (guarded by the Session's mu) is set once an ack counted
	// that arrived after the holding's answer: only from then on do the
	// session's acks vouch for it (docs/contract.md §14, A4). Until then
	// it is led at most until capAt.
	vouched bool
	// leaving (guarded by the Session's mu) is set while a release or
	// transfer of the holding is under way, or after one whose outcome is
	// unknown: the holding is not led (its deadline is zero).
	leaving bool
	// capAt is the acquire's send time + the session lease TTL × (1 −
	// DriftMargin): how long the acquire's own write is safe, whatever
	// the acks say. Zero for a holding a resume listed (every ack of the
	// resumed socket arrives after its answer).
	capAt time.Time
}

// OpenSession opens a session with the service (docs/contract.md §14). It
// returns ErrSessionsUnsupported when the service offers none. ctx bounds
// the opening only; the Session lives until Close.
func (c *Client) OpenSession(ctx context.Context, cfg SessionConfig) (*Session, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("client.OpenSession: %w", err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Session{c: c, cfg: cfg, ctx: sctx, cancel: cancel, dead: make(chan *sconn, 4), moves: make(chan *sconn, 4),
		window: cfg.Window, changed: make(chan struct{}), connected: make(chan struct{}), swapped: make(chan struct{}), holdings: map[holdingKey]*sessionHolding{}}
	sc, err := s.connect(ctx, false)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("leasesvc open session: %w", err)
	}
	s.setConn(sc)
	s.wg.Add(1)
	go s.supervise()
	return s, nil
}

// Window returns the session's heartbeat window, as the service answered.
func (s *Session) Window() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.window
}

// Deadline returns the session's safe deadline, on the Session's clock
// (with its monotonic reading): the send time of the last heartbeat the
// service acknowledged + window × (1 − DriftMargin). Zero before the first
// acknowledgement.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadlineLocked()
}

func (s *Session) deadlineLocked() time.Time {
	if s.ackedSent.IsZero() {
		return time.Time{}
	}
	return s.ackedSent.Add(SafeSpan(s.window, s.cfg.DriftMargin))
}

// deadlineChanged returns a channel closed the next time Deadline moves.
func (s *Session) deadlineChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// signalLocked wakes whoever waits on deadlineChanged; s.mu is held.
func (s *Session) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// holding returns the holding of name with token, or nil when the session
// does not hold it (any more).
func (s *Session) holding(name string, token int64) *sessionHolding {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holdings[holdingKey{name, token}]
}

// addHolding records a holding the service answered on sc. It reports
// whether sc's acks vouch for it: false when a resume began on another
// socket since sc became current (sconn.retiredAt). That resume did not
// claim the holding, so until it is acquired again through the current
// socket nothing may lead it; it is recorded all the same, so that a
// later resume claims it.
//
// sent is the acquire's send time: until an ack arrives after this answer,
// the holding is led at most until sent + the session lease TTL × (1 −
// DriftMargin) (docs/contract.md §14, A4).
func (s *Session) addHolding(sc *sconn, l Lease, sent time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := holdingKey{l.Name, l.FencingToken}
	var capAt time.Time
	if s.leaseTTL > 0 { // a service that does not say it: the acks alone
		capAt = sent.Add(SafeSpan(s.leaseTTL, s.cfg.DriftMargin))
	}
	if h := s.holdings[k]; h == nil && !s.closed {
		s.holdings[k] = &sessionHolding{name: l.Name, holder: l.Holder, token: l.FencingToken,
			lost: make(chan struct{}), yield: make(chan string, 1), capAt: capAt}
	} else if h != nil {
		// Acquired again (through a resumed socket): acks vouch for it
		// only from this answer on.
		h.vouched, h.capAt = false, capAt
		s.signalLocked()
	}
	return sc.retiredAt.IsZero()
}

// holdingDeadline is the deadline of the holding h: the session's (A3),
// and no later than h.capAt until an ack arrived after h's answer (A4).
func (s *Session) holdingDeadline(h *sessionHolding) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.leaving {
		return time.Time{}
	}
	d := s.deadlineLocked()
	if !h.vouched && !h.capAt.IsZero() && h.capAt.Before(d) {
		d = h.capAt
	}
	return d
}

// letGoing marks h (nil: none) as being released or transferred, or not.
func (s *Session) letGoing(h *sessionHolding, on bool) {
	if h == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.leaving != on {
		h.leaving = on
		s.signalLocked()
	}
}

// dropHolding forgets a holding that ended: released, transferred (err
// nil: nobody is told) or lost (err says why). It reports whether the
// session held it.
func (s *Session) dropHolding(name string, token int64, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropLocked(holdingKey{name, token}, err)
}

func (s *Session) dropLocked(k holdingKey, err error) bool {
	h := s.holdings[k]
	if h == nil {
		return false
	}
	delete(s.holdings, k)
	if err == nil {
		err = fmt.Errorf("%w: the holding ended", ErrLost)
	}
	h.lostErr = err
	close(h.lost)
	return true
}

// loseAllLocked ends every holding with err; s.mu is held.
func (s *Session) loseAllLocked(err error) {
	for k := range s.holdings {
		s.dropLocked(k, err)
	}
}

// Done returns a channel closed when the session has ended: Close
// finished, or the service ended it.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Err says why the session ended: nil while it lives, ErrSessionClosed
// after Close, an error matching ErrSessionEnded (and ErrSessionClosed)
// when the service ended it.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endErr
}

// closedErr is the error of a request on the ended session: Err, or
// ErrSessionClosed while Close is under way.
func (s *Session) closedErr() error {
	if err := s.Err(); err != nil {
		return err
	}
	return ErrSessionClosed
}

// endLocked ends the session because the service ended it (cause): every
// holding is lost, the sockets are closed, nothing is sent any more; s.mu
// is held. The caller cancels s.ctx.
func (s *Session) endLocked(cause error) {
	if s.closed {
		return
	}
	s.closed = true
	s.endErr = fmt.Errorf("%w: %w", ErrSessionEnded, cause)
	// Lost as a lost push says it (code lease_lost), the refusal told.
	s.loseAllLocked(&Error{Code: "lease_lost", kind: ErrLost, Detail: "the service ended the session: " + cause.Error()})
	s.ackedSent = time.Time{}
	s.signalLocked()
	for _, sc := range []*sconn{s.conn, s.latest} {
		if sc != nil {
			_ = sc.ws.CloseNow()
		}
	}
	if s.conn != nil {
		s.conn = nil
		s.connected = make(chan struct{})
	}
}

// Close ends the session: it sends close, which releases every lease of
// the session at once, waits for the answer (until ctx ends; while the
// session reconnects, for the reconnection first) and closes the socket.
// Every holding left is lost with ErrSessionClosed.
func (s *Session) Close(ctx context.Context) error {
	_, _ = s.socket(ctx)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.endErr = ErrSessionClosed
	sc := s.conn
	s.conn = nil // its end, after the close, is no drop to reconnect after
	s.connected = make(chan struct{})
	s.loseAllLocked(ErrSessionClosed)
	s.mu.Unlock()
	var err error
	if sc != nil {
		_, err = s.call(ctx, sc, outMsg{Type: "close"})
	}
	s.cancel()
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("leasesvc close session: %w", err)
	}
	return nil
}
