package sessionsim

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Conn is one TCP connection of the in-memory network, from an agent (the
// client end) to an instance (the server end). Bytes flow through two
// pipes, cut into units (framing); the faults act on units.
type Conn struct {
	ID     int
	Inst   *Instance
	agent  *Spec // the agent that dialled it
	up     *pipe // agent → instance
	down   *pipe // instance → agent
	client *end
	server *end
}

// pipe is one direction of a Conn. Units written are queued, and delivered
// into buf (readable) when the latency has passed unless held; a held pipe
// keeps its frames queued, in order, until released (the HTTP heads pass).
type pipe struct {
	c      *Conn
	up     bool
	cond   *sync.Cond // on World.mu: the reader waits here
	fr     framing
	timer  *time.Timer // delivers the first unit queued when it arrives
	queue  []unit
	held   bool
	buf    [][]byte // units delivered, not yet read; the first maybe in part
	mid    bool     // the first of buf was read in part
	eof    bool     // the writer closed: EOF once everything queued is read
	reset  bool     // the connection was cut: what was not read is lost
	closed bool     // the reader closed its end: writes fail
	ended  bool     // the agent's end read the close frame that ends it
}

// end is one end of a Conn, a net.Conn.
type end struct {
	c        *Conn
	server   bool
	in, out  *pipe
	closed   bool
	dropped  bool // closed by the simulation for the agent (Drop)
	pending  bool // closed while its instance was paused: takes effect at wake
	deadline time.Time
	timer    *time.Timer
}

var (
	errReset  = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	errBroken = &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
)

type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }

// dial connects agent sp to the instance the route points at, and points
// the route at the next instance (round robin); the connection waits in
// that instance's backlog until it accepts it.
func (w *World) dial(ctx context.Context, sp *Spec) (net.Conn, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	in := w.Insts[w.route]
	w.route = (w.route + 1) % len(w.Insts)
	if in.ln.closed {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	c := &Conn{ID: len(w.conns), Inst: in, agent: sp}
	c.up = &pipe{c: c, up: true, cond: sync.NewCond(&w.mu), held: in.holdIn}
	c.down = &pipe{c: c, cond: sync.NewCond(&w.mu)}
	c.client = &end{c: c, in: c.down, out: c.up}
	c.server = &end{c: c, server: true, in: c.up, out: c.down}
	w.conns = append(w.conns, c)
	in.ln.backlog = append(in.ln.backlog, c.server)
	in.ln.cond.Broadcast()
	w.logf("conn %d: agent %s dials instance %d", c.ID, sp.Holder, in.K)
	return c.client, nil
}

// paused reports whether e is the server end of a paused instance; w.mu held.
func (e *end) paused() bool { return e.server && e.c.Inst.paused }

func (e *end) Read(p []byte) (int, error) {
	w := e.c.Inst.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		in := e.in
		switch {
		case e.closed && e.dropped && !in.ended:
			in.ended = true
			return copy(p, closeFrame), nil
		case e.closed:
			return 0, net.ErrClosed
		case e.paused():
		case !e.deadline.IsZero() && !time.Now().Before(e.deadline):
			return 0, os.ErrDeadlineExceeded
		case len(in.buf) > 0:
			n := copy(p, in.buf[0])
			if in.buf[0] = in.buf[0][n:]; len(in.buf[0]) == 0 {
				in.buf, in.mid = in.buf[1:], false
			} else {
				in.mid = true
			}
			return n, nil
		case in.reset, in.eof && len(in.queue) == 0:
			if !e.server && !in.ended {
				in.ended = true
				return copy(p, closeFrame), nil
			}
			if in.reset {
				return 0, errReset
			}
			return 0, io.EOF
		}
		in.cond.Wait()
	}
}

// closeFrame is a close frame (1001, going away) from the instance. The
// agent's end of a connection reads one before its end: the WebSocket
// library of the agent closes a socket (and clears the finalizer that
// would close it from outside the bubble, fatally) only when it reads a
// close frame or is told to close, and rawsession does not close a socket
// whose read failed. To the agent it ends the socket as the failure would.
var closeFrame = []byte{0x88, 0x02, 0x03, 0xe9}

func (e *end) Write(p []byte) (int, error) {
	w := e.c.Inst.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for e.paused() && !e.closed {
		e.out.cond.Wait() // a paused instance writes nothing
	}
	switch {
	case e.closed:
		return 0, net.ErrClosed
	case e.out.reset, e.out.closed:
		return 0, errBroken
	}
	now := time.Now()
	for _, u := range e.out.fr.feed(p, e.out.up) {
		if e.out.up && u.msg != nil {
			w.check.sent(e.c, u.msg, now)
			w.logf("conn %d: agent %s sends %s", e.c.ID, e.c.agent.Holder, u.msg)
		}
		u.at = now.Add(e.c.Inst.Latency)
		e.out.queue = append(e.out.queue, u)
	}
	e.out.deliver()
	return len(p), nil
}

// deliver moves the queued units that have arrived into buf, up to the
// first held frame, and sets the timer for the next; w.mu held.
func (pp *pipe) deliver() {
	w := pp.c.Inst.w
	now := time.Now()
	n := 0
	for _, u := range pp.queue {
		if pp.held && u.frame {
			break
		}
		if u.at.After(now) {
			if pp.timer == nil {
				pp.timer = time.AfterFunc(u.at.Sub(now), func() {
					w.mu.Lock()
					defer w.mu.Unlock()
					pp.timer = nil
					pp.deliver()
				})
			}
			break
		}
		n++
		pp.buf = append(pp.buf, u.b)
		if u.msg == nil {
			continue
		}
		if pp.up {
			w.logf("conn %d: %s reaches instance %d", pp.c.ID, u.msg, pp.c.Inst.K)
		} else {
			w.logf("conn %d: agent %s gets %s from instance %d", pp.c.ID, pp.c.agent.Holder, u.msg, pp.c.Inst.K)
			w.check.received(pp.c, u.msg, now)
		}
	}
	if n > 0 {
		pp.queue = append(pp.queue[:0:0], pp.queue[n:]...)
		pp.cond.Broadcast()
	}
}

func (e *end) Close() error {
	w := e.c.Inst.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if e.closed || e.pending {
		return nil
	}
	if e.paused() {
		e.pending = true
		return nil
	}
	e.closeLocked()
	return nil
}

// closeLocked closes e as a FIN: the peer reads what was sent, then EOF;
// w.mu held.
func (e *end) closeLocked() {
	e.closed, e.pending = true, false
	e.out.eof = true
	e.in.closed = true
	if e.timer != nil {
		e.timer.Stop()
	}
	e.in.cond.Broadcast()
	e.out.cond.Broadcast()
	e.c.Inst.w.logf("conn %d: the %s closes its end", e.c.ID, e.side())
}

func (e *end) side() string {
	if e.server {
		return "instance"
	}
	return "agent"
}

// drop closes c on the agent's side, as the agent does when it gives up
// on a socket (rule A3): the instance reads what was sent, then EOF; w.mu
// held.
func (c *Conn) drop() {
	if !c.client.closed {
		c.client.dropped = true
		c.client.closeLocked()
	}
}

// cut breaks c as a network failure would: both ends fail, and nothing
// that was not read arrives; w.mu held.
func (c *Conn) cut() {
	for _, pp := range []*pipe{c.up, c.down} {
		pp.reset, pp.queue = true, nil
		if pp.mid { // the frame being read ends, so that the close frame parses
			pp.buf = pp.buf[:1]
		} else {
			pp.buf = nil
		}
		pp.cond.Broadcast()
	}
	c.Inst.w.logf("conn %d: cut", c.ID)
}

// live reports whether c still carries anything; w.mu held.
func (c *Conn) live() bool {
	return !c.up.reset && !(c.client.closed && c.server.closed)
}

func (e *end) LocalAddr() net.Addr  { return addr(e.side()) }
func (e *end) RemoteAddr() net.Addr { return addr("peer of " + e.side()) }

func (e *end) SetDeadline(t time.Time) error { return e.SetReadDeadline(t) }

// SetReadDeadline makes a pending and later Reads fail at t (net/http
// interrupts its background read this way before a hijack).
func (e *end) SetReadDeadline(t time.Time) error {
	w := e.c.Inst.w
	w.mu.Lock()
	defer w.mu.Unlock()
	e.deadline = t
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	if t.IsZero() {
		return nil
	}
	if d := time.Until(t); d > 0 {
		e.timer = time.AfterFunc(d, func() {
			w.mu.Lock()
			e.in.cond.Broadcast()
			w.mu.Unlock()
		})
	}
	e.in.cond.Broadcast()
	return nil
}

// SetWriteDeadline does nothing: writes never block but on a paused
// instance, and a paused process misses its deadlines too.
func (e *end) SetWriteDeadline(time.Time) error { return nil }

// listener is an instance's listening socket.
type listener struct {
	in      *Instance
	cond    *sync.Cond
	backlog []*end
	closed  bool
}

// Accept returns the next connection; a paused instance accepts nothing.
func (l *listener) Accept() (net.Conn, error) {
	w := l.in.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		switch {
		case l.closed:
			return nil, net.ErrClosed
		case !l.in.paused && len(l.backlog) > 0:
			e := l.backlog[0]
			l.backlog = l.backlog[1:]
			return e, nil
		}
		l.cond.Wait()
	}
}

func (l *listener) Close() error {
	w := l.in.w
	w.mu.Lock()
	defer w.mu.Unlock()
	l.closed = true
	l.cond.Broadcast()
	return nil
}

func (l *listener) Addr() net.Addr { return addr("instance") }
