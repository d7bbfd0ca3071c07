package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// sconn is one socket of a session.
type sconn struct {
	ws *websocket.Conn
	// wmu orders the writes: the service wants every request's id larger
	// than those before it on the socket.
	wmu sync.Mutex

	mu      sync.Mutex
	pending map[int64]*pendingCall
	beats   []sentBeat // the heartbeats awaiting their ack, by id
	dead    bool
	err     error // why it died, or the socket-level error the service sent
	// quietSince is when the first heartbeat went out since anything last
	// arrived on the socket; zero when none did (the silent-socket rule).
	quietSince time.Time
	// lostEarly holds the lost and revoked pushes that arrived for a
	// holding the agent does not hold yet while an acquire of its lease
	// was in flight here: the result that follows is not led
	// (docs/contract.md §14, A5).
	lostEarly map[holdingKey]error

	// retiredAt (guarded by the Session's mu) is when an open or resume
	// went out on a later socket; zero while none did. That resume claimed
	// only the holdings known then, and the instance it went to may own
	// the session from then on, so from retiredAt this socket vouches for
	// nothing: an ack (of whichever heartbeat), a push, or an answer to an
	// acquire, release or transfer on it counts for nothing, and nothing
	// more is sent on it (docs/contract.md §14, A2 and step 6).
	retiredAt time.Time

	sockFast // the heartbeat's fast paths (session_fast.go)
}

// errSocketClosed is in the error of a request whose socket closed before
// its answer (or before it could be sent).
var errSocketClosed = errors.New("session socket closed")

// isDead reports whether the socket's reader has stopped.
func (sc *sconn) isDead() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.dead
}

// pendingCall is a request awaiting its answer.
type pendingCall struct {
	typ       string
	name      string // the lease of a release or transfer
	token     int64
	sent      time.Time       // when the request went out, on the Session's clock
	ch        chan callAnswer // buffered
	abandoned bool            // its caller gave up: a holding it gives is released
}

type callAnswer struct {
	in  inMsg
	err error
}

// dial opens a socket of the session route, authenticated like every
// other request.
func (s *Session) dial(ctx context.Context) (*sconn, error) {
	c := s.c
	dctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(dctx, http.MethodGet, c.base.String()+sessionPath, nil)
	if err != nil {
		return nil, &Error{Err: err, kind: ErrInvalid}
	}
	if err := c.authorize(dctx, req, c.cfg.RequestTimeout); err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	ws, resp, err := websocket.Dial(dctx, req.URL.String(), &websocket.DialOptions{
		HTTPClient: c.hc, HTTPHeader: req.Header, Subprotocols: []string{sessionProtocol},
	})
	if err != nil {
		if resp == nil {
			return nil, &Error{Err: err, kind: ErrUnavailable}
		}
		switch resp.StatusCode {
		case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
			return nil, fmt.Errorf("%w (%d from %s)", ErrSessionsUnsupported, resp.StatusCode, sessionPath)
		case http.StatusSwitchingProtocols:
			return nil, &Error{Err: err, kind: ErrInternal}
		}
		var raw []byte
		if resp.Body != nil { // what Dial kept of it: at most 1 KiB
			raw, _ = io.ReadAll(resp.Body)
		}
		if err := problemError(resp, raw); resp.StatusCode == http.StatusTooManyRequests && sessionsCapped(raw) {
			return nil, slotRefusal{err} // not the rate limit: the service's session cap
		}
		return nil, problemError(resp, raw)
	}
	ws.SetReadLimit(MaxAnswerBytes)
	sc := &sconn{ws: ws, pending: map[int64]*pendingCall{}}
	s.watch(sc)
	s.wg.Add(1)
	go s.read(sc)
	return sc, nil
}

// connect dials and opens a session, or resumes this one when resume is
// true. A resume proposes an epoch one above every epoch the session has
// seen or proposed, recorded before it is sent (docs/contract.md §14, A1);
// the moment it goes out, its socket is the current one and every earlier
// one is retired (A2).
func (s *Session) connect(ctx context.Context, resume bool) (*sconn, error) {
	sc, err := s.dial(ctx)
	var capped slotRefusal
	if !resume && errors.As(err, &capped) {
		return nil, sessionLimitError(capped) // refused at the upgrade
	}
	if err != nil {
		return nil, err
	}
	m := outMsg{Type: "open", WindowMs: s.cfg.Window.Milliseconds()}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = sc.ws.CloseNow()
		return nil, s.closedErr()
	}
	if resume {
		s.epoch++
		m = outMsg{Type: "resume", SessionID: s.id, Epoch: s.epoch, Leases: []resumeLease{}}
		for _, h := range s.holdings {
			m.Leases = append(m.Leases, resumeLease{Name: h.name, Holder: h.holder, FencingToken: h.token})
		}
	}
	// The resume claims only these holdings, and its instance may own the
	// session from the moment it is sent: the earlier sockets vouch for
	// nothing after this (sconn.retiredAt), whether or not it succeeds.
	now := s.cfg.Clock.Now()
	for _, o := range []*sconn{s.conn, s.latest} {
		if o != nil && o.retiredAt.IsZero() {
			o.retiredAt = now
		}
	}
	s.latest = sc
	s.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, s.c.cfg.RequestTimeout)
	defer cancel()
	in, err := s.call(cctx, sc, m)
	if err == nil && in.Type != "opened" && in.Type != "resumed" {
		err = &Error{kind: ErrInternal, Err: fmt.Errorf("answer %q to %s", in.Type, m.Type)}
	}
	if err != nil {
		_ = sc.ws.CloseNow()
		if e := in.conflictEpoch(); resume && e > 0 {
			// The session is at e: the next resume proposes above it (A1).
			s.mu.Lock()
			s.epoch = max(s.epoch, e)
			s.mu.Unlock()
		}
		if !resume && errors.Is(err, ErrRateLimited) {
			err = sessionLimitError{err}
		}
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.latest != sc || s.closed {
		// A later open or resume went out meanwhile: this answer is of a
		// retired socket, and counts for nothing (A2).
		_ = sc.ws.CloseNow()
		return nil, &Error{kind: ErrUnavailable, Err: fmt.Errorf("a later %s replaced this one", m.Type)}
	}
	if !resume {
		s.id = in.SessionID
		s.epoch = max(in.Epoch, 1)
		s.loseAllLocked(fmt.Errorf("%w: the session ended", ErrLost))
		s.ackedSent = time.Time{}
		s.signalLocked()
	} else {
		s.epoch = max(s.epoch, in.Epoch)
	}
	if in.WindowMs > 0 {
		s.window = time.Duration(in.WindowMs) * time.Millisecond
	}
	s.heartbeat = time.Duration(in.HeartbeatMs) * time.Millisecond
	if s.heartbeat <= 0 {
		s.heartbeat = s.window / 4
	}
	s.leaseTTL = time.Duration(in.LeaseTTLMs) * time.Millisecond
	for _, l := range in.Lost {
		s.dropLocked(holdingKey{l.Name, l.FencingToken}, lostError(inMsg{Type: "lost", Reason: l.Reason}))
		s.cfg.Logger.Warn("leasesvc session: lease lost while reconnecting", "lease", l.Name, "fencingToken", l.FencingToken, "reason", l.Reason)
	}
	return sc, nil
}

// call sends m on sc and waits for its answer; an error message is
// returned as the error it carries.
func (s *Session) call(ctx context.Context, sc *sconn, m outMsg) (inMsg, error) {
	p := &pendingCall{typ: m.Type, name: m.Name, token: m.FencingToken, ch: make(chan callAnswer, 1)}
	sc.wmu.Lock()
	m.ID = s.ids.Add(1)
	sc.mu.Lock()
	if sc.dead {
		err := sc.err
		sc.mu.Unlock()
		sc.wmu.Unlock()
		return inMsg{}, &Error{kind: ErrUnavailable, Err: fmt.Errorf("%w: %w", errSocketClosed, err)}
	}
	sc.pending[m.ID] = p
	p.sent = s.cfg.Clock.Now()
	sc.mu.Unlock()
	err := s.write(ctx, sc, m)
	sc.wmu.Unlock()
	if err != nil {
		sc.mu.Lock()
		delete(sc.pending, m.ID)
		sc.mu.Unlock()
		return inMsg{}, err
	}
	select {
	case a := <-p.ch:
		if a.in.lostFirst != nil {
			return a.in, a.in.lostFirst
		}
		if a.err == nil && a.in.Type == "error" {
			return a.in, a.in.problem()
		}
		return a.in, a.err
	case <-ctx.Done():
		// take delivers under sc.mu and checks abandoned there: either the
		// answer is in p.ch now, or take will see abandoned.
		sc.mu.Lock()
		var late *callAnswer
		select {
		case a := <-p.ch:
			late = &a
		default:
			p.abandoned = true
		}
		sc.mu.Unlock()
		if late != nil && late.err == nil && late.in.Type == "result" && p.typ == "acquire" && late.in.Lease != nil && late.in.Lease.Held {
			s.releaseAbandoned(sc, *late.in.Lease)
		}
		return inMsg{}, &Error{kind: ErrUnavailable, Err: context.Cause(ctx)}
	}
}

// write sends one message; a socket that cannot take it within
// RequestTimeout is closed, so that the session reconnects. ctx is only
// checked before: the socket's library closes a socket whose write's
// context ends, and a caller giving up must not end the session's socket.
func (s *Session) write(ctx context.Context, sc *sconn, m outMsg) error {
	if ctx.Err() != nil {
		return &Error{kind: ErrUnavailable, Err: context.Cause(ctx)}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return &Error{kind: ErrInvalid, Err: fmt.Errorf("encode %s: %w", m.Type, err)}
	}
	return s.send(sc, b)
}

// read takes the messages of sc until it closes, then fails what still
// waits on it and reports it dead.
func (s *Session) read(sc *sconn) {
	defer s.wg.Done()
	defer sc.unwatch()
	var err error
	for {
		var typ websocket.MessageType
		var b []byte
		typ, b, err = s.readMessage(sc)
		if err != nil {
			break
		}
		if re, ok := ackID(b); ok && typ == websocket.MessageText {
			s.takeAck(sc, re, true) // what take would do with it, without the decoding
			continue
		}
		sc.mu.Lock()
		sc.quietSince = time.Time{}
		sc.mu.Unlock()
		var m inMsg
		if typ != websocket.MessageText || json.Unmarshal(b, &m) != nil {
			s.cfg.Logger.Warn("leasesvc session: unreadable message from the service")
			continue
		}
		s.take(sc, m)
	}
	sc.mu.Lock()
	sc.dead = true
	if sc.err == nil {
		sc.err = err
	}
	cause := sc.err
	pending := sc.pending
	sc.pending = map[int64]*pendingCall{}
	sc.mu.Unlock()
	for _, p := range pending {
		p.ch <- callAnswer{err: &Error{kind: ErrUnavailable, Err: fmt.Errorf("%w: %w", errSocketClosed, cause)}}
	}
	_ = sc.ws.CloseNow()
	select {
	case s.dead <- sc:
	case <-s.ctx.Done():
	}
}

// take handles one message of the service.
func (s *Session) take(sc *sconn, m inMsg) {
	if m.Re != nil {
		re := *m.Re
		if m.Type == "ack" {
			s.takeAck(sc, re, false)
			return
		}
		sc.mu.Lock()
		p := sc.pending[re]
		delete(sc.pending, re)
		var lostFirst error
		if p != nil && p.typ == "acquire" {
			lostFirst = sc.answeredAcquireLocked(p, m)
		}
		sc.mu.Unlock()
		if p == nil {
			return
		}
		held := m.Type == "result" && p.typ == "acquire" && m.Lease != nil && m.Lease.Held && lostFirst == nil
		switch {
		case lostFirst != nil:
			// Its lost came first (A5): the holding left the instance's
			// table before its answer was read, and no ack covers it.
			s.cfg.Logger.Warn("leasesvc session: an acquire was answered after its holding's lost; not leading it",
				"lease", m.Lease.Name, "fencingToken", m.Lease.FencingToken)
			m = inMsg{Type: "error", Re: m.Re, lostFirst: lostFirst}
		case held:
			m.unvouched = !s.addHolding(sc, *m.Lease, p.sent)
		case m.Type == "result" && (p.typ == "release" || p.typ == "transfer"):
			m.unvouched = !s.settle(sc, holdingKey{p.name, p.token})
		}
		sc.mu.Lock()
		abandoned := p.abandoned
		if !abandoned {
			p.ch <- callAnswer{in: m} // buffered
		}
		sc.mu.Unlock()
		if abandoned && held {
			s.releaseAbandoned(sc, *m.Lease)
		}
		return
	}
	switch m.Type {
	case "lost", "revoked", "yield", "move":
		if !s.isCurrent(sc) {
			// A retired socket's: the resume that retired it says what is
			// still held (docs/contract.md §14, A2).
			s.cfg.Logger.Info("leasesvc session: ignored a push of a replaced socket", "type", m.Type, "lease", m.Name, "fencingToken", m.FencingToken)
			return
		}
	}
	switch m.Type {
	case "lost", "revoked":
		s.cfg.Logger.Warn("leasesvc session: lease lost", "lease", m.Name, "fencingToken", m.FencingToken, "type", m.Type, "reason", m.Reason)
		s.dropHolding(m.Name, m.FencingToken, lostError(m))
		sc.lostBeforeAnswer(m) // a repeated acquire of it in flight answers it no more (A5)
	case "yield":
		if h := s.holding(m.Name, m.FencingToken); h != nil {
			select {
			case h.yield <- m.To:
			default:
			}
		}
	case "move":
		s.cfg.Logger.Info("leasesvc session: asked to move", "reason", m.Reason)
		select {
		case s.moves <- sc:
		default:
		}
	case "error":
		err := m.problem()
		s.cfg.Logger.Warn("leasesvc session: the service refused the socket", "err", err)
		sc.mu.Lock()
		sc.err = err
		sc.mu.Unlock()
	}
}

// isCurrent reports whether sc is the current socket: the one on which
// open or resume was last sent (docs/contract.md §14, A2).
func (s *Session) isCurrent(sc *sconn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sc == s.latest && sc.retiredAt.IsZero()
}

// settle forgets the holding k that a release or transfer answered on sc
// ended, and reports true, unless a resume went out after sc was current:
// that resume listed the holding and may have taken it back, so the
// answer settles nothing (Session.letGo). It runs as the answer is read,
// so that no resume begun later lists a holding that ended.
func (s *Session) settle(sc *sconn, k holdingKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !sc.retiredAt.IsZero() {
		return false
	}
	s.dropLocked(k, nil)
	return true
}

// releaseAbandoned releases a holding whose acquirer gave up (or whose
// release or transfer was given up), through the socket that answered its
// acquire (nil: the current socket), and forgets it whatever the answer:
// a holding nobody leads must not be claimed by a later resume. When the
// release fails, the holding runs out at the session lease TTL.
func (s *Session) releaseAbandoned(sc *sconn, l Lease) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, s.c.cfg.RequestTimeout)
		defer cancel()
		var err error
		if sc == nil {
			sc, err = s.socket(ctx)
		}
		if err == nil {
			_, err = s.call(ctx, sc, outMsg{Type: "release", Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken})
		}
		if err != nil {
			s.cfg.Logger.Warn("leasesvc session: could not release an abandoned holding; it runs out at the session lease TTL",
				"lease", l.Name, "fencingToken", l.FencingToken, "err", err)
		}
		s.dropHolding(l.Name, l.FencingToken, nil)
	}()
}

// current returns the current socket.
func (s *Session) current() *sconn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

// setConn makes sc the current socket; false (and sc closed) when the
// session was closed meanwhile.
func (s *Session) setConn(sc *sconn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed && sc != nil {
		_ = sc.ws.CloseNow()
		return false
	}
	switch {
	case sc != nil && s.conn == nil:
		close(s.connected)
	case sc == nil && s.conn != nil:
		s.connected = make(chan struct{})
	}
	if sc != s.conn {
		close(s.swapped)
		s.swapped = make(chan struct{})
	}
	s.conn = sc
	return true
}
