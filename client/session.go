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

// sessionLimitError is a 429 resource_exhausted answered to open: the
// service holds as many sessions as LEASESVC_MAX_SESSIONS or
// LEASESVC_MAX_SESSIONS_PER_CALLER allow (docs/contract.md §14). It
// matches ErrRateLimited; an Elector falls back to plain renewals on it
// (a 429 before the upgrade is the caller's rate limit, and is retried).
type sessionLimitError struct{ error }

// Unwrap returns the refusal.
func (e sessionLimitError) Unwrap() error { return e.error }

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
// resume says what is still held). A resume that the service refuses
// because the session ended reports every lease lost and opens a new
// session. A Session is safe for concurrent use.
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
	closed    bool
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
	return s.ackedSent.Add(safeSpan(s.window, s.cfg.DriftMargin))
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
func (s *Session) addHolding(sc *sconn, l Lease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := holdingKey{l.Name, l.FencingToken}
	if s.holdings[k] == nil && !s.closed {
		s.holdings[k] = &sessionHolding{name: l.Name, holder: l.Holder, token: l.FencingToken,
			lost: make(chan struct{}), yield: make(chan string, 1)}
	}
	return sc.retiredAt.IsZero()
}

// dropHolding forgets a holding that ended: released, transferred (err
// nil: nobody is told) or lost (err says why).
func (s *Session) dropHolding(name string, token int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(holdingKey{name, token}, err)
}

func (s *Session) dropLocked(k holdingKey, err error) {
	h := s.holdings[k]
	if h == nil {
		return
	}
	delete(s.holdings, k)
	if err == nil {
		err = fmt.Errorf("%w: the holding ended", ErrLost)
	}
	h.lostErr = err
	close(h.lost)
}

// loseAllLocked ends every holding with err; s.mu is held.
func (s *Session) loseAllLocked(err error) {
	for k := range s.holdings {
		s.dropLocked(k, err)
	}
}

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
func (s *Session) letGo(ctx context.Context, m outMsg) (Lease, error) {
	h := s.holding(m.Name, m.FencingToken)
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
			return nil, ErrSessionClosed
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
			return nil, ErrSessionClosed
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
			return nil, ErrSessionClosed
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
			return nil, ErrSessionClosed
		}
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

// outMsg is a message to the service (docs/contract.md §14).
type outMsg struct {
	Type         string          `json:"type"`
	ID           int64           `json:"id"`
	WindowMs     int64           `json:"windowMs,omitempty"`
	SessionID    string          `json:"sessionId,omitempty"`
	Epoch        int64           `json:"epoch,omitempty"`
	Leases       []resumeLease   `json:"leases,omitzero"`
	Name         string          `json:"name,omitempty"`
	Holder       string          `json:"holder,omitempty"`
	FencingToken int64           `json:"fencingToken,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	Checkpoint   json.RawMessage `json:"checkpoint,omitempty"`
	WaitMs       int64           `json:"waitMs,omitempty"`
	Priority     *int            `json:"priority,omitempty"`
	Preempt      bool            `json:"preempt,omitempty"`
	To           string          `json:"to,omitempty"`
	ToPrincipal  string          `json:"toPrincipal,omitempty"`
	ReserveMs    int64           `json:"reserveMs,omitempty"`
}

// resumeLease is a holding named in a resume.
type resumeLease struct {
	Name         string `json:"name"`
	Holder       string `json:"holder"`
	FencingToken int64  `json:"fencingToken"`
}

// inMsg is a message from the service.
type inMsg struct {
	Type         string          `json:"type"`
	Re           *int64          `json:"re"`
	SessionID    string          `json:"sessionId"`
	Epoch        int64           `json:"epoch"`
	WindowMs     int64           `json:"windowMs"`
	HeartbeatMs  int64           `json:"heartbeatMs"`
	LeaseTTLMs   int64           `json:"leaseTtlMs"`
	Leases       []Lease         `json:"leases"`
	Lost         []lostLease     `json:"lost"`
	Lease        *Lease          `json:"lease"`
	Problem      json.RawMessage `json:"problem"`
	Name         string          `json:"name"`
	FencingToken int64           `json:"fencingToken"`
	Reason       string          `json:"reason"`
	Operator     string          `json:"operator"`
	To           string          `json:"to"`

	// unvouched marks an acquire's, release's or transfer's result that
	// arrived on a socket after a resume began elsewhere
	// (Session.addHolding, Session.settle).
	unvouched bool
}

// lostLease is a holding a resume could not take back.
type lostLease struct {
	Name         string `json:"name"`
	FencingToken int64  `json:"fencingToken"`
	Reason       string `json:"reason"`
}

// problem returns the error an error message carries.
func (m inMsg) problem() error {
	var p struct {
		Status int `json:"status"`
	}
	_ = json.Unmarshal(m.Problem, &p)
	if p.Status == 0 {
		p.Status = 500
	}
	err := problemFrom(p.Status, 0, m.Problem)
	if e, ok := err.(*Error); ok && e.Code == "lease_held" {
		return &HeldError{} // the problem named no lease: who holds it is unknown
	}
	return err
}

// conflictEpoch returns the session's epoch that a 409 session_conflict
// answered to a resume names, or 0.
func (m inMsg) conflictEpoch() int64 {
	var p struct {
		Code  string `json:"code"`
		Epoch int64  `json:"epoch"`
	}
	if m.Type != "error" || json.Unmarshal(m.Problem, &p) != nil || p.Code != "session_conflict" {
		return 0
	}
	return p.Epoch
}

// lostError is the loss of a holding that the service pushed.
func lostError(m inMsg) error {
	e := &Error{Status: 409, Code: "lease_lost", kind: ErrLost}
	if m.Type == "revoked" {
		e.Detail = fmt.Sprintf("revoked by %s: %s", m.Operator, m.Reason)
	} else {
		e.Detail = "the session was told it ended: " + m.Reason
	}
	return e
}
