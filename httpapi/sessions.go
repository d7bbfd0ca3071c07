package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/leasesvc/leasesvc/internal/membudget"
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

// connectSession upgrades an authenticated request to a session socket.
// Every refusal comes before the upgrade, as problem+json. The socket
// takes a session slot and its fixed cost in the memory budget before the
// upgrade (docs/contract.md §14 Limits).
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
	c := a.newSessionConn(r, !v2)
	if p := c.admit(); p != nil {
		a.cfg.Audit.Session(r.Context(), "session_connect", p.code, c.principal, "", p.detail)
		a.fail(w, r, *p)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{proto},
		// guardSources has checked Origin and Host as for every route.
		InsecureSkipVerify: true,
	})
	if err != nil {
		c.release()
		a.log.WarnContext(r.Context(), "session: upgrade failed", "err", err)
		return
	}
	// The response's write deadline (Limits.WriteTimeout) and the
	// server's read deadline must not bound the socket's life.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.SetReadDeadline(time.Time{})
	// Messages are read through a limit of our own (read), so that a
	// message too big is answered and audited like every other close.
	ws.SetReadLimit(-1)
	c.ws = ws
	c.serve(r)
}

// newSessionConn makes the socket of an upgrade request, not yet admitted.
func (a *api) newSessionConn(r *http.Request, v1 bool) *sessionConn {
	cfg := a.cfg.Sessions.Config()
	rateKey := principalOf(r)
	if a.cfg.Authenticator == nil {
		rateKey = clientAddr(r)
	}
	c := &sessionConn{a: a, principal: principalOf(r), caller: a.callerKey(r), rateKey: rateKey, v1: v1,
		cfg: cfg, wake: make(chan struct{}, 1), limiter: rate.NewLimiter(rate.Limit(cfg.MessageRate), cfg.MessageRate),
		inflight: make(chan struct{}, cfg.MaxLeases), quick: make(chan struct{}, maxQuickOps)}
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(r.Context()))
	return c
}

// maxQuickOps bounds the lease operations under way on one socket that do
// not wait: each holds its answer (a lease of up to 33 KB) until it is
// queued, so a client that sends faster than it reads holds at most this
// many. 32 answers at 100 ms a backend write is 320 a second, above the
// message rate (200).
const maxQuickOps = 32

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
	cfg       session.Config
	principal string
	caller    string
	rateKey   string          // the key of the per-principal rate limit (Config.Limiter)
	v1        bool            // leasesvc.session.v1: resumes are refused
	ctx       context.Context // done when the socket ends
	cancel    context.CancelFunc
	limiter   *rate.Limiter      // messages per second of this socket
	inflight  chan struct{}      // waiting acquires under way
	quick     chan struct{}      // other requests under way (acquire, renew, …)
	slot      *session.Slot      // the session slot taken at the upgrade
	acct      *membudget.Account // the socket's fixed cost and its queued bytes
	wake      chan struct{}      // tells the writer something was queued

	mu      sync.Mutex
	sess    *session.Session
	started bool // a message arrived: the open timeout is off
	closed  bool // the socket is closing: nothing more is queued
	lastID  int64
	// queue holds the messages not yet written, queued their bytes
	// (at most cfg.OutBuffer, charged to acct).
	queue  [][]byte
	queued int64
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

// send queues one message. A socket whose queue already holds the out
// buffer's bytes (so it holds at most the buffer and one message more: a
// resumed answer larger than the buffer still goes out), or whose bytes
// the memory budget cannot take, is closed at once (1013): its session
// lives on and can be resumed (docs/contract.md §14 Limits).
func (c *sessionConn) send(v any) {
	b, err := wire.Marshal(v)
	if err != nil {
		c.a.log.Error("session: encoding a message failed", "err", err)
		return
	}
	c.sendEncoded(b)
}

// sendEncoded queues one encoded message, as send does.
func (c *sessionConn) sendEncoded(b []byte) {
	n := int64(len(b))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	switch {
	case c.queued >= c.cfg.OutBuffer:
		c.overflowLocked(codeResourceExhausted, fmt.Sprintf("the client reads too slowly: more than %d bytes of messages queued (LEASESVC_SESSION_OUT_BUFFER)", c.cfg.OutBuffer))
		return
	case !c.acct.Grow(n):
		c.overflowLocked(codeResourceExhausted, "the client reads too slowly: the instance's memory budget cannot queue more for this caller (LEASESVC_MEMORY_PER_CALLER, LEASESVC_MEMORY_BUDGET)")
		return
	}
	c.queue = append(c.queue, b)
	c.queued += n
	c.wakeWriter()
}

// wakeWriter tells the writer that the queue changed.
func (c *sessionConn) wakeWriter() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// overflowLocked closes a socket whose client does not read: what is queued
// is dropped and given back, and the socket closes now (1013) with reason;
// c.mu held.
func (c *sessionConn) overflowLocked(outcome, reason string) {
	c.closed = true
	c.dropLocked()
	c.closeCode, c.closeReason = websocket.StatusTryAgainLater, reason
	c.wakeWriter()
	c.auditClose(c.sess, outcome, websocket.StatusTryAgainLater, reason)
	go c.closeNow(websocket.StatusTryAgainLater, reason)
}

// dropLocked forgets the queued messages and gives their bytes back; c.mu
// held.
func (c *sessionConn) dropLocked() {
	c.acct.Shrink(c.queued)
	c.queue, c.queued = nil, 0
}

// shut queues a close after the messages already queued.
// The socket's slot, unless it passed to a session, is given back at
// once: a client that reconnects on reading the close finds it free.
func (c *sessionConn) shut(code websocket.StatusCode, reason string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.closeCode, c.closeReason = code, reason
	c.wakeWriter()
	c.mu.Unlock()
	if c.slot != nil {
		c.slot.Release()
	}
}

// closeNow closes the socket at once.
func (c *sessionConn) closeNow(code websocket.StatusCode, reason string) {
	_ = c.ws.Close(code, clip(reason, 120))
	c.cancel()
}

// fatal answers a socket-level failure with an error without re, then
// closes the socket with code.
func (c *sessionConn) fatal(code websocket.StatusCode, p problem) {
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	c.auditClose(s, p.code, code, p.detail)
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

// answerError answers request re with p; the socket lives on. A problem
// with a retry hint carries it as retryAfter, in seconds, as the REST
// answer's Retry-After header does.
func (c *sessionConn) answerError(re int64, p problem) {
	m := map[string]any{"type": "error", "re": re, "problem": problemBody(p)}
	if p.retryAfter > 0 {
		m["retryAfter"] = p.retryAfter
	}
	c.send(m)
}

// protocolError is a message that breaks the protocol.
func protocolError(format string) problem {
	return problem{status: http.StatusBadRequest, code: codeSessionProtocol, detail: format}
}

// serve runs the socket: a writer goroutine, the reader on this one, the
// open timeout and the max-age timer. When the socket ends without a close
// message the session lives on, detached, until its window passes (or it
// is resumed); the socket's slot, unless it passed to a session, and its
// charge are given back.
func (c *sessionConn) serve(r *http.Request) {
	defer func() {
		c.release()
		if f := socketDone.Load(); f != nil {
			(*f)(r.Host)
		}
	}()
	done := make(chan struct{})
	go c.write(done)
	openBy := c.cfg.Clock.AfterFunc(c.cfg.OpenTimeout, c.openTimedOut)
	defer openBy.Stop()
	age := time.AfterFunc(c.cfg.MaxAge, func() {
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
	<-done
}

// socketDone, when set (by tests), is called with the request's Host as
// each socket ends, after its slot and its charge were given back.
var socketDone atomic.Pointer[func(host string)]

// write sends the queued messages in order, then the close the socket was
// shut with.
func (c *sessionConn) write(done chan<- struct{}) {
	defer close(done)
	for {
		c.mu.Lock()
		if len(c.queue) == 0 {
			closed := c.closed
			c.mu.Unlock()
			if closed {
				break
			}
			select {
			case <-c.wake:
			case <-c.ctx.Done():
				c.drop()
				return
			}
			continue
		}
		b := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(c.ctx, c.a.cfg.Limits.WriteTimeout)
		err := c.ws.Write(ctx, websocket.MessageText, b)
		cancel()
		c.mu.Lock()
		if n := int64(len(b)); c.queued >= n { // dropLocked may have forgotten it
			c.queued -= n
			c.acct.Shrink(n)
		}
		c.mu.Unlock()
		if err != nil {
			c.cancel()
			c.drop()
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

// drop closes the queue (nothing more is queued) and forgets what is in it.
func (c *sessionConn) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.dropLocked()
}

// read reads messages until the socket ends or breaks the protocol.
func (c *sessionConn) read(r *http.Request) {
	for {
		typ, data, err := c.readMessage()
		switch {
		case errors.Is(err, errMessageTooBig):
			c.fatal(websocket.StatusMessageTooBig, problem{status: http.StatusRequestEntityTooLarge, code: codePayloadTooLarge,
				detail: fmt.Sprintf("a message is at most %d bytes (LEASESVC_SESSION_MAX_MESSAGE)", c.cfg.MaxMessage)})
			return
		case err != nil:
			return // closed, or ended here
		}
		c.mu.Lock()
		c.started = true
		s, closed := c.sess, c.closed
		c.mu.Unlock()
		if closed { // nothing more is answered: read no more
			return
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
		if s != nil {
			s.Touch()
		}
		if !c.handle(r, data) {
			return
		}
	}
}

// errMessageTooBig is a message longer than cfg.MaxMessage.
var errMessageTooBig = errors.New("session: message too big")

// readMessage reads one whole message of at most cfg.MaxMessage bytes.
func (c *sessionConn) readMessage() (websocket.MessageType, []byte, error) {
	typ, rd, err := c.ws.Reader(c.ctx)
	if err != nil {
		return 0, nil, err
	}
	data, err := io.ReadAll(io.LimitReader(rd, c.cfg.MaxMessage+1))
	switch {
	case err != nil:
		return 0, nil, err
	case int64(len(data)) > c.cfg.MaxMessage:
		return 0, nil, errMessageTooBig
	}
	return typ, data, nil
}
