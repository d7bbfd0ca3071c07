package httpapi

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/internal/membudget"
	"github.com/leasesvc/leasesvc/internal/overload"
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
	// A refused upgrade closes its connection: a client retrying in a
	// loop would otherwise keep an idle connection (its buffers and
	// goroutine) per refusal. The upgrade's own answer replaces it.
	w.Header().Set("Connection", "close")
	if !a.authenticate(w, r, "session", "") || !a.mayConnect(w, r) || a.refuseNew(w, r, "session") {
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
	if p := c.admit(r); p != nil {
		a.cfg.Audit.Session(r.Context(), "session_connect", p.code, c.principal, "", p.detail)
		a.fail(w, r, *p)
		return
	}
	hj := &hijackRecorder{ResponseWriter: w}
	ws, err := websocket.Accept(hj, r, &websocket.AcceptOptions{
		Subprotocols: []string{proto},
		// guardSources has checked Origin and Host as for every route.
		InsecureSkipVerify: true,
		// Pings and pongs count against the message rate like any other
		// message (docs/contract.md §16).
		OnPingReceived: func(context.Context, []byte) bool { return c.control() },
		OnPongReceived: func(context.Context, []byte) { c.control() },
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
	c.ws, c.netConn = ws, hj.conn
	// The socket runs on a goroutine of its own and the handler returns:
	// net/http's goroutine, whose stack holds the whole middleware chain
	// (tens of KiB once grown), is not kept for the socket's life, and the
	// request's span and access line end at the upgrade (101).
	go c.serveRecovered(r.WithContext(c.ctx))
}

// serveRecovered is serve on a goroutine of the socket's own: a panic
// there (none is known) would end the process, which net/http's recovery
// no longer covers, so it is logged with its stack and ends the socket
// alone.
func (c *sessionConn) serveRecovered(r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			c.a.log.ErrorContext(c.ctx, "session: the socket's goroutine panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			c.mu.Lock()
			s := c.sess
			c.closed, c.closeSent = true, true
			c.mu.Unlock()
			if s != nil {
				s.Detach(c) // the session lives on for its window, to be resumed
			}
			_ = c.ws.CloseNow()
			c.cancel()
			c.finish()
		}
	}()
	c.serve(r)
}

// mayConnect checks that the policy grants the caller acquire on some
// lease name: a session exists to hold leases, so a principal that may
// acquire nothing may not open or resume one (docs/security.md), and is
// answered 403 before it takes a slot.
func (a *api) mayConnect(w http.ResponseWriter, r *http.Request) bool {
	if a.cfg.Policy == nil {
		return true
	}
	if _, some := a.cfg.Policy.ListScope(principalOf(r), auth.Acquire, ""); some {
		return true
	}
	detail := "the policy grants this caller acquire on no lease name, and a session needs it"
	a.cfg.Audit.Refused(r.Context(), "session", codePermissionDenied, principalOf(r), "", detail)
	a.fail(w, r, problem{status: http.StatusForbidden, code: codePermissionDenied, detail: detail})
	return false
}

// newSessionConn makes the socket of an upgrade request, not yet admitted.
func (a *api) newSessionConn(r *http.Request, v1 bool) *sessionConn {
	cfg := a.cfg.Sessions.Config()
	rateKey := principalOf(r)
	if a.cfg.Authenticator == nil {
		rateKey = clientAddr(r)
	}
	c := &sessionConn{a: a, principal: principalOf(r), caller: a.callerKey(r), rateKey: rateKey, v1: v1,
		cfg: cfg, done: make(chan struct{}), limiter: rate.NewLimiter(rate.Limit(cfg.MessageRate), cfg.MessageRate),
		inflight: make(chan struct{}, cfg.MaxLeases), quick: make(chan struct{}, maxQuickOps),
	}
	c.ctx, c.cancel = context.WithCancel(socketContext(r))
	return c
}

// socketContext is what a socket's context carries of its upgrade
// request's: the request's facts (principal, route) and its trace ids, for
// log lines, but not the request's span itself, nor anything else the
// middleware hung on it, which the socket would keep for its life.
func socketContext(r *http.Request) context.Context {
	ctx := trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(r.Context()))
	if info := requestInfo(r); info != nil {
		ctx = context.WithValue(ctx, infoKey{}, info)
	}
	return ctx
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
	done      chan struct{}      // closed when nothing more will be written (finish)
	finished  sync.Once          // closes done
	netConn   net.Conn           // the connection under ws, for a bounded close
	pingErr   atomic.Bool        // a ping or pong beyond the message rate ended the read
	closing   atomic.Bool        // closeNow set the connection's deadlines

	mu      sync.Mutex
	sess    *session.Session
	started bool // a message arrived: the open timeout is off
	closed  bool // the socket is closing: nothing more is queued
	lastID  int64
	// queue holds the messages not yet written, queued their bytes
	// (at most cfg.OutBuffer, charged to acct).
	queue  [][]byte
	queued int64
	// writing is set while a goroutine (a writer, or the reader after a
	// heartbeat) writes the queue out; one at a time, in queue order.
	// spawned is set from a writer's start (kickWriterLocked) until it
	// begins; closeSent once the close is written, or the socket broke.
	writing, spawned, closeSent bool
	// inline is set while the reader handles a heartbeat: it writes the
	// ack itself (flush), so nothing queued meanwhile wakes the writer.
	inline bool
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
	c.kickWriterLocked()
	c.mu.Unlock()
	if c.slot != nil {
		c.slot.Release()
	}
}

// closeWait bounds the close handshake: how long a closing socket waits
// for the rest of a frame the client left unfinished and for its close.
const closeWait = 2 * time.Second

// closeNow closes the socket at once. The close handshake reads what the
// client still sends, up to its close; a client that stalls in the middle
// of a frame would hold it (and the socket) forever, so the connection's
// reads end after closeWait.
func (c *sessionConn) closeNow(code websocket.StatusCode, reason string) {
	if c.netConn != nil {
		_ = c.netConn.SetReadDeadline(time.Now().Add(closeWait))
		c.closing.Store(true) // writeMessage leaves the deadline alone
		_ = c.netConn.SetWriteDeadline(time.Now().Add(closeWait))
	}
	_ = c.ws.Close(code, clip(reason, 120))
	c.cancel()
}

// hijackRecorder keeps the connection websocket.Accept hijacks.
type hijackRecorder struct {
	http.ResponseWriter
	conn net.Conn
}

// Hijack hijacks the connection and keeps it.
func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	h.conn = nc
	return nc, brw, err
}

// Unwrap is the ResponseWriter under it (http.ResponseController).
func (h *hijackRecorder) Unwrap() http.ResponseWriter { return h.ResponseWriter }

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
		ReservedFor: p.reservedFor, ReservedUntil: p.reservedUntil, Epoch: p.epoch, Limit: p.limit}
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
	// Past the hard threshold the heaviest callers' sockets are closed
	// (1013); their sessions live on for their window, to be resumed
	// elsewhere (docs/contract.md §16).
	defer c.a.cfg.Overload.Register(c.caller, overload.KindSocket, func(overload.Level) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.closed {
			c.overflowLocked(codeUnavailable, "the instance is overloaded and closed this socket: resume (another instance may answer)")
		}
	})()
	// Reads and writes are not given c.ctx (readMessage, writeMessage):
	// when it ends, the connection is closed, which ends them.
	defer context.AfterFunc(c.ctx, func() { _ = c.ws.CloseNow() })()
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
	case <-c.done:
	case <-time.After(c.a.cfg.Limits.WriteTimeout):
	}
	c.closeNow(websocket.StatusNormalClosure, "")
	<-c.done
}

// socketDone, when set (by tests), is called with the request's Host as
// each socket ends, after its slot and its charge were given back.
var socketDone atomic.Pointer[func(host string)]

// read reads messages until the socket ends or breaks the protocol.
func (c *sessionConn) read(r *http.Request) {
	for {
		typ, data, buf, charged, err := c.readMessage()
		if err != nil && c.pingErr.Load() {
			err = errTooManyFrames
		}
		var ce websocket.CloseError
		var refused *readRefused
		switch {
		case errors.Is(err, errMessageTooBig):
			c.fatal(websocket.StatusMessageTooBig, problem{status: http.StatusRequestEntityTooLarge, code: codePayloadTooLarge,
				detail: fmt.Sprintf("a message is at most %d bytes (LEASESVC_SESSION_MAX_MESSAGE)", c.cfg.MaxMessage)})
			return
		case errors.As(err, &refused):
			c.fatal(websocket.StatusTryAgainLater, c.refusal(refused.n, "piece of the message being read"))
			return
		case errors.Is(err, errTooManyFrames):
			// The connection is already closed (control): a client that
			// floods control frames is not answered, only audited.
			c.mu.Lock()
			s := c.sess
			c.mu.Unlock()
			c.auditClose(s, codeResourceExhausted, websocket.StatusPolicyViolation,
				"more messages per second than the session allows, pings and pongs included (LEASESVC_SESSION_MESSAGE_RATE)")
			return
		case err != nil && !errors.As(err, &ce) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) &&
			!errors.Is(err, net.ErrClosed) && c.ctx.Err() == nil:
			// A frame that breaks RFC 6455 (unmasked, a bad opcode or
			// length): 1002, not a normal close.
			c.closeNow(websocket.StatusProtocolError, "protocol error")
			return
		case err != nil:
			return // closed, or ended here
		}
		ok := c.message(r, typ, data)
		if buf != nil {
			smallBufs.Put(buf) // what acts on a message later keeps copies
		}
		c.acct.Shrink(charged)
		if !c.flushReader() || !ok {
			return
		}
	}
}

// message acts on one message read; false ends the socket.
func (c *sessionConn) message(r *http.Request, typ websocket.MessageType, data []byte) bool {
	c.mu.Lock()
	c.started = true
	s, closed := c.sess, c.closed
	c.mu.Unlock()
	if closed { // nothing more is answered: read no more
		return false
	}
	if !c.limiter.Allow() {
		c.fatal(websocket.StatusPolicyViolation, problem{status: http.StatusTooManyRequests, code: codeResourceExhausted,
			detail: "more messages per second than the session allows (LEASESVC_SESSION_MESSAGE_RATE)"})
		return false
	}
	if typ != websocket.MessageText {
		c.fatal(websocket.StatusUnsupportedData, protocolError("every message must be one JSON text frame"))
		return false
	}
	if s != nil {
		s.Touch()
	}
	return c.handle(r, data)
}

// control counts a ping or pong the client sent against the socket's
// message rate (LEASESVC_SESSION_MESSAGE_RATE): beyond it the read fails
// and the socket is closed as for any other message over the rate. It
// runs on the reading goroutine (websocket's OnPingReceived); true lets
// the library answer a ping.
func (c *sessionConn) control() bool {
	if c.limiter.Allow() {
		return true
	}
	c.pingErr.Store(true)
	c.cancel() // the read in progress ends; read closes the socket
	return false
}
