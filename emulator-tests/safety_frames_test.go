package emulatortests

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/internal/rawsession"
)

// frameProxy is a TCP proxy that reads the WebSocket frames of the session
// sockets it carries (docs/contract.md §14), so that the safety run's faults
// can act on one socket of one session, which toxiproxy cannot: hold the
// frames an agent sends on it and deliver them after the agent gave up on
// the socket (hold, deliver), cut it alone (cut), and keep every resume it
// carried, with its upgrade request, for a replay on a new connection
// (captures, replayResume). Other bytes (the upgrade, plain HTTP) pass
// through as they are; a frame is forwarded whole, as it was sent.
type frameProxy struct {
	ln       net.Listener
	url      string        // http://host:port of the listener
	upstream func() string // the address each new connection goes to
	caps     *captures

	mu     sync.Mutex
	conns  map[*proxyConn]bool
	armed  []*hold // holds waiting for the next resume of their session
	closed bool
}

// startFrameProxy listens on a loopback port; each connection goes to
// upstream(). It stops when stop is called.
func startFrameProxy(upstream func() string, caps *captures) (*frameProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &frameProxy{ln: ln, url: "http://" + ln.Addr().String(), upstream: upstream, caps: caps, conns: map[*proxyConn]bool{}}
	go p.accept()
	return p, nil
}

func (p *frameProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

// stop closes the listener and every connection.
func (p *frameProxy) stop() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.closeBoth()
	}
}

// proxyConn is one connection through a frameProxy.
type proxyConn struct {
	p          *frameProxy
	client, up net.Conn

	mu      sync.Mutex
	head    []byte             // the upgrade request, as sent
	first   rawsession.Message // the first message (open or resume)
	frame   []byte             // its frame, as sent
	session string             // the session the socket carries, once known
	epoch   int64              // its epoch on this socket, once known
	held    *hold              // non-nil: the agent's frames go to held
}

func (p *frameProxy) serve(client net.Conn) {
	br := bufio.NewReader(client)
	head, err := readHead(br)
	if err != nil {
		_ = client.Close()
		return
	}
	up, err := net.DialTimeout("tcp", p.upstream(), 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	c := &proxyConn{p: p, client: client, up: up, head: head}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.closeBoth()
		return
	}
	p.conns[c] = true
	p.mu.Unlock()
	if _, err := up.Write(head); err != nil {
		c.closeBoth()
		return
	}
	if !isUpgrade(head) { // plain HTTP: bytes as they are
		go func() { _, _ = io.Copy(client, up); c.closeBoth() }()
		_, _ = io.Copy(up, br)
		c.closeBoth()
		return
	}
	go c.fromServer()
	c.fromClient(br)
}

// isUpgrade reports whether an HTTP request head asks for a WebSocket.
func isUpgrade(head []byte) bool {
	for line := range strings.SplitSeq(string(head), "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), "Upgrade") && strings.EqualFold(strings.TrimSpace(v), "websocket") {
			return true
		}
	}
	return false
}

func (c *proxyConn) closeBoth() {
	_ = c.client.Close()
	_ = c.up.Close()
	c.p.mu.Lock()
	delete(c.p.conns, c)
	c.p.mu.Unlock()
}

// fromClient forwards the agent's frames, frame by frame, unless a hold
// takes them.
func (c *proxyConn) fromClient(br *bufio.Reader) {
	var err error
	for first := true; err == nil; first = false {
		var f frame
		if f, err = readFrame(br); err != nil {
			break
		}
		if first {
			c.noteFirst(f)
		}
		c.mu.Lock()
		h := c.held
		c.mu.Unlock()
		if h != nil {
			h.add(f)
			continue
		}
		_, err = c.up.Write(f.raw)
	}
	c.mu.Lock()
	h := c.held
	c.mu.Unlock()
	if h != nil { // the agent gave up on the socket: its frames wait for deliver
		h.goneOnce.Do(func() { close(h.gone) })
		return
	}
	c.closeBoth()
}

// noteFirst reads the socket's first message; a resume engages a hold
// armed for the next resume of its session.
func (c *proxyConn) noteFirst(f frame) {
	m, ok := f.message()
	if !ok {
		return
	}
	c.mu.Lock()
	c.first, c.frame = m, f.raw
	if m.Type == "resume" {
		c.session, c.epoch = m.SessionID, m.Epoch
	}
	c.mu.Unlock()
	if m.Type != "resume" {
		return
	}
	c.p.mu.Lock()
	var h *hold
	for i, a := range c.p.armed {
		if a.session == m.SessionID {
			h = a
			c.p.armed = append(c.p.armed[:i], c.p.armed[i+1:]...)
			break
		}
	}
	c.p.mu.Unlock()
	if h != nil {
		h.engage(c, m.Epoch)
	}
}

// fromServer forwards the instance's bytes to the agent (while it is
// there), noting the answer to the first message, and every message that
// answers frames a hold delivered.
func (c *proxyConn) fromServer() {
	br := bufio.NewReader(c.up)
	head, err := readHead(br)
	if err == nil {
		_, _ = c.client.Write(head) // the agent may be gone (a held socket)
	}
	for err == nil {
		var f frame
		if f, err = readFrame(br); err != nil {
			break
		}
		if m, ok := f.message(); ok {
			c.noteAnswer(m)
		}
		_, _ = c.client.Write(f.raw)
	}
	c.mu.Lock()
	h := c.held
	c.mu.Unlock()
	if h != nil {
		h.upOnce.Do(func() { close(h.upDone) })
	}
	c.closeBoth()
}

// noteAnswer notes the session and epoch of an opened or resumed answer,
// keeps an answered resume in the captures, and passes every message to a
// delivered hold.
func (c *proxyConn) noteAnswer(m rawsession.Message) {
	c.mu.Lock()
	first, h := c.first, c.held
	answers := first.ID != 0 && m.Re == first.ID
	if answers && (m.Type == "opened" || m.Type == "resumed") {
		c.session, c.epoch = m.SessionID, m.Epoch
	}
	head, raw := c.head, c.frame
	c.mu.Unlock()
	if answers && first.Type == "resume" {
		c.p.caps.add(capture{session: first.SessionID, epoch: first.Epoch, id: first.ID, head: head, frame: raw, answer: m.Type})
	}
	if h != nil {
		h.answer(m)
	}
}

// hold is a fault's claim on the frames an agent sends on one socket: they
// are kept, not forwarded, until deliver sends them to the instance, after
// the agent has given up on the socket.
type hold struct {
	session string
	engaged chan struct{} // closed once a socket is held
	gone    chan struct{} // closed when the agent's side of it closed
	upDone  chan struct{} // closed when the instance's side closed
	answers chan rawsession.Message

	once, goneOnce, upOnce sync.Once
	mu                     sync.Mutex
	conn                   *proxyConn
	epoch                  int64 // the held socket's epoch: its resume's proposal, or its session's
	frames                 [][]byte
	msgs                   []rawsession.Message // the held frames' messages
}

func newHold(session string) *hold {
	return &hold{session: session, engaged: make(chan struct{}), gone: make(chan struct{}), upDone: make(chan struct{}),
		answers: make(chan rawsession.Message, 256)}
}

func (h *hold) engage(c *proxyConn, epoch int64) {
	h.once.Do(func() {
		h.mu.Lock()
		h.conn, h.epoch = c, epoch
		h.mu.Unlock()
		c.mu.Lock()
		c.held = h
		c.mu.Unlock()
		close(h.engaged)
	})
}

func (h *hold) add(f frame) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.frames = append(h.frames, f.raw)
	if m, ok := f.message(); ok {
		h.msgs = append(h.msgs, m)
	}
}

// holds reports whether a held frame is a message of type typ.
func (h *hold) holds(typ string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.msgs {
		if m.Type == typ {
			return true
		}
	}
	return false
}

func (h *hold) answer(m rawsession.Message) {
	select {
	case h.answers <- m:
	default:
	}
}

// holdNext holds the next socket whose first message resumes session.
func (p *frameProxy) holdNext(session string) *hold {
	h := newHold(session)
	p.mu.Lock()
	p.armed = append(p.armed, h)
	p.mu.Unlock()
	return h
}

// holdCurrent holds, from now on, the frames of the socket that carries
// session; nil when the proxy carries none.
func (p *frameProxy) holdCurrent(session string) *hold {
	p.mu.Lock()
	var c *proxyConn
	for pc := range p.conns {
		pc.mu.Lock()
		if pc.session == session && pc.held == nil && (c == nil || pc.epoch > c.epoch) {
			c = pc
		}
		pc.mu.Unlock()
	}
	p.mu.Unlock()
	if c == nil {
		return nil
	}
	h := newHold(session)
	c.mu.Lock()
	epoch := c.epoch
	c.mu.Unlock()
	h.engage(c, epoch)
	return h
}

// cut closes the agent's side of the held socket only: the agent sees its
// socket drop; the instance's side stays open for deliver.
func (h *hold) cut() {
	h.mu.Lock()
	c := h.conn
	h.mu.Unlock()
	if c != nil {
		_ = c.client.Close()
	}
}

// deliver sends the held frames to the instance once the agent's side has
// closed (at most wait for that), then collects what the instance answers
// for at most wait, or until it closes the socket, and closes it. false:
// nothing was delivered (no socket held, the agent's side still open, or
// the instance's side gone).
func (h *hold) deliver(wait time.Duration) ([]rawsession.Message, bool) {
	select {
	case <-h.engaged:
	default:
		return nil, false
	}
	select {
	case <-h.gone:
	case <-time.After(wait):
		h.cut()
		return nil, false
	}
	h.mu.Lock()
	c, frames := h.conn, h.frames
	h.mu.Unlock()
	defer c.closeBoth()
	for _, f := range frames {
		if _, err := c.up.Write(f); err != nil {
			return nil, false
		}
	}
	var out []rawsession.Message
	timeout := time.After(wait)
	for {
		select {
		case m := <-h.answers:
			out = append(out, m)
		case <-h.upDone:
			for {
				select {
				case m := <-h.answers:
					out = append(out, m)
				default:
					return out, true
				}
			}
		case <-timeout:
			return out, true
		}
	}
}
