package httpapi

import (
	"cmp"
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/session"
)

// SessionsPath is the WebSocket route of sessions (docs/contract.md §14).
const SessionsPath = "/v1/sessions:connect"

// SessionSubprotocol is the WebSocket subprotocol of sessions
// (docs/contract.md §14): resumes propose their epoch.
const SessionSubprotocol = "leasesvc.session.v2"

// SessionSubprotocolV1 is the subprotocol of clients whose resumes propose
// no epoch: still accepted, but its resume is refused (docs/contract.md
// §14 Old clients).
const SessionSubprotocolV1 = "leasesvc.session.v1"

// Problem codes of sessions.
const (
	codeSessionNotFound = "session_not_found"
	codeSessionConflict = "session_conflict"
	codeSessionProtocol = "session_protocol"
)

// sessionOutBuffer bounds the messages queued for a socket that reads
// slower than they come; past it the socket is closed (1013).
const sessionOutBuffer = 1024

// connectSession upgrades an authenticated request to a session socket.
// Every refusal comes before the upgrade, as problem+json.
func (a *api) connectSession(w http.ResponseWriter, r *http.Request) {
	routed(r, SessionsPath, "session", "")
	if !a.authenticate(w, r, "session", "") {
		return
	}
	if _, p := checkQuery(r); p != nil {
		a.fail(w, r, *p)
		return
	}
	if !headerHasToken(r.Header, "Upgrade", "websocket") || !headerHasToken(r.Header, "Connection", "upgrade") {
		a.fail(w, r, problem{status: http.StatusBadRequest, code: codeInvalidArgument,
			detail: "a WebSocket upgrade (RFC 6455) is required on this route"})
		return
	}
	v2 := headerHasToken(r.Header, "Sec-WebSocket-Protocol", SessionSubprotocol)
	if !v2 && !headerHasToken(r.Header, "Sec-WebSocket-Protocol", SessionSubprotocolV1) {
		a.fail(w, r, problem{status: http.StatusBadRequest, code: codeInvalidArgument,
			detail: "the WebSocket subprotocol " + SessionSubprotocol + " is required (Sec-WebSocket-Protocol)"})
		return
	}
	proto := SessionSubprotocol
	if !v2 {
		proto = SessionSubprotocolV1
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{proto},
		// guardSources has checked Origin and Host as for every route.
		InsecureSkipVerify: true,
	})
	if err != nil {
		a.log.WarnContext(r.Context(), "session: upgrade failed", "err", err)
		return
	}
	// The response's write deadline (Limits.WriteTimeout) and the
	// server's read deadline must not bound the socket's life.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.SetReadDeadline(time.Time{})
	cfg := a.cfg.Sessions.Config()
	ws.SetReadLimit(cfg.MaxMessage)
	c := &sessionConn{a: a, ws: ws, principal: principalOf(r), caller: a.callerKey(r), v1: !v2,
		out: make(chan []byte, sessionOutBuffer), limiter: rate.NewLimiter(rate.Limit(cfg.MessageRate), cfg.MessageRate),
		inflight: make(chan struct{}, cfg.MaxLeases)}
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(r.Context()))
	c.serve(r)
}

// headerHasToken reports whether a comma-separated header holds token
// (case-insensitive).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// sessionConn is one session socket.
type sessionConn struct {
	a         *api
	ws        *websocket.Conn
	principal string
	caller    string
	v1        bool            // leasesvc.session.v1: resumes are refused
	ctx       context.Context // done when the socket ends
	cancel    context.CancelFunc
	out       chan []byte
	limiter   *rate.Limiter
	inflight  chan struct{} // requests under way (acquire, renew, …)

	mu     sync.Mutex
	sess   *session.Session
	closed bool // the socket is closing: nothing more is queued
	lastID int64
	// closeCode and closeReason close the socket once the queue is sent.
	closeCode   websocket.StatusCode
	closeReason string
	// ops counts lease operations not yet answered; ended holds the close
	// of a session that ended while some were, until they are answered
	// (503: resume and retry, docs/contract.md §14).
	ops   int
	ended *session.Push
}

// beginOp counts a lease operation under way.
func (c *sessionConn) beginOp() {
	c.mu.Lock()
	c.ops++
	c.mu.Unlock()
}

// endOp uncounts an answered lease operation; the last one answered after
// the session ended closes the socket.
func (c *sessionConn) endOp() {
	c.mu.Lock()
	c.ops--
	p := c.ended
	if c.ops > 0 {
		p = nil
	}
	c.mu.Unlock()
	if p != nil {
		c.shut(websocket.StatusNormalClosure, p.Reason)
	}
}

// Push queues what the session tells the agent unasked (session.Conn).
func (c *sessionConn) Push(p session.Push) {
	switch p.Type {
	case session.PushEnded:
		c.mu.Lock()
		wait := c.ops > 0
		if wait {
			c.ended = &p // the answers under way go out first
		}
		c.mu.Unlock()
		if !wait {
			c.shut(websocket.StatusNormalClosure, p.Reason)
		}
		return
	case session.PushMove:
		c.send(map[string]any{"type": "move", "reason": p.Reason})
	case session.PushYield:
		c.send(map[string]any{"type": "yield", "name": p.Name, "fencingToken": p.FencingToken, "to": p.To})
	case session.PushRevoked:
		c.send(map[string]any{"type": "revoked", "name": p.Name, "fencingToken": p.FencingToken, "reason": p.Reason, "operator": p.Operator})
	default:
		c.send(map[string]any{"type": "lost", "name": p.Name, "fencingToken": p.FencingToken, "reason": p.Reason})
	}
}

// send queues one message; a socket whose queue is full is closed.
func (c *sessionConn) send(v any) {
	b, err := wire.Marshal(v)
	if err != nil {
		c.a.log.Error("session: encoding a message failed", "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	select {
	case c.out <- b:
	default:
		// The client reads too slowly: close now, and let the writer
		// drop what is queued.
		c.closed = true
		close(c.out)
		go c.closeNow(websocket.StatusTryAgainLater, "the client reads too slowly")
	}
}

// shut queues a close after the messages already queued.
func (c *sessionConn) shut(code websocket.StatusCode, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	close(c.out)
	c.closeCode, c.closeReason = code, reason
}

// closeNow closes the socket at once.
func (c *sessionConn) closeNow(code websocket.StatusCode, reason string) {
	_ = c.ws.Close(code, clip(reason, 120))
	c.cancel()
}

// fatal answers a socket-level failure with an error without re, then
// closes the socket with code.
func (c *sessionConn) fatal(code websocket.StatusCode, p problem) {
	c.send(map[string]any{"type": "error", "problem": problemBody(p)})
	c.shut(code, p.detail)
}

// problemBody is the problem member of an error message.
func problemBody(p problem) problemJSON {
	body := problemJSON{Type: ProblemTypeBase + p.code, Title: cmp.Or(p.title, http.StatusText(p.status)), Status: p.status, Code: p.code, Detail: p.detail,
		ReservedFor: p.reservedFor, ReservedUntil: p.reservedUntil, Epoch: p.epoch}
	for _, v := range p.violations {
		body.Errors = append(body.Errors, fieldErrorJSON{Field: v.Field, Detail: v.Description})
	}
	if p.lease != nil {
		lj := wire.FromLease(*p.lease)
		body.Lease = &lj
	}
	return body
}

// answerError answers request re with p; the socket lives on.
func (c *sessionConn) answerError(re int64, p problem) {
	c.send(map[string]any{"type": "error", "re": re, "problem": problemBody(p)})
}

// protocolError is a message that breaks the protocol.
func protocolError(format string) problem {
	return problem{status: http.StatusBadRequest, code: codeSessionProtocol, detail: format}
}

// serve runs the socket: a writer goroutine, the reader on this one, and
// the max-age timer. When the socket ends without a close message the
// session lives on, detached, until its window passes (or it is resumed).
func (c *sessionConn) serve(r *http.Request) {
	done := make(chan struct{})
	go c.write(done)
	age := time.AfterFunc(c.a.cfg.Sessions.Config().MaxAge, func() {
		c.send(map[string]any{"type": "move", "reason": session.MoveMaxAge})
	})
	defer age.Stop()
	c.read(r)
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		s.Detach(c)
	}
	c.shut(websocket.StatusNormalClosure, "")
	select {
	case <-done:
	case <-time.After(c.a.cfg.Limits.WriteTimeout):
	}
	c.closeNow(websocket.StatusNormalClosure, "")
}

// write sends the queued messages in order, then the close the socket was
// shut with.
func (c *sessionConn) write(done chan<- struct{}) {
	defer close(done)
	for b := range c.out {
		ctx, cancel := context.WithTimeout(c.ctx, c.a.cfg.Limits.WriteTimeout)
		err := c.ws.Write(ctx, websocket.MessageText, b)
		cancel()
		if err != nil {
			c.cancel()
			for range c.out { // drain until shut closes it
			}
			return
		}
	}
	c.mu.Lock()
	code, reason := c.closeCode, c.closeReason
	c.mu.Unlock()
	if code == 0 {
		code = websocket.StatusNormalClosure
	}
	c.closeNow(code, reason)
}

// read reads messages until the socket ends or breaks the protocol.
func (c *sessionConn) read(r *http.Request) {
	for {
		typ, data, err := c.ws.Read(c.ctx)
		if err != nil {
			return // closed, too big (closed with 1009 by the library), or ended here
		}
		if !c.limiter.Allow() {
			c.fatal(websocket.StatusPolicyViolation, problem{status: http.StatusTooManyRequests, code: codeResourceExhausted,
				detail: "more messages per second than the session allows (LEASESVC_SESSION_MESSAGE_RATE)"})
			return
		}
		if typ != websocket.MessageText {
			c.fatal(websocket.StatusUnsupportedData, protocolError("every message must be one JSON text frame"))
			return
		}
		c.mu.Lock()
		s := c.sess
		c.mu.Unlock()
		if s != nil {
			s.Touch()
		}
		if !c.handle(r, data) {
			return
		}
	}
}
