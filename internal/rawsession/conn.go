// Package rawsession is a minimal client of the session protocol of
// docs/contract.md §14 (GET /v1/sessions:connect, subprotocol
// leasesvc.session.v2, one JSON text message per frame), written from the
// wire description alone so that the benchmarks (cmd/leasebench) and the
// safety runs (emulator-tests) measure the service, not the Go SDK's
// session. It does what an agent needs and no more: open or resume,
// heartbeat, acquire, renew, release, close, and the pushes the service
// sends. It keeps no policy of its own: the caller decides when to
// heartbeat and when its terms end (see Agent for the usual loop).
package rawsession

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
)

// Subprotocol is the WebSocket subprotocol of the session route.
const Subprotocol = "leasesvc.session.v2"

// Message is any message of the protocol, either direction; the fields
// that a type does not use are zero.
type Message struct {
	Type         string          `json:"type"`
	ID           int64           `json:"id,omitempty"`
	Re           int64           `json:"re,omitempty"`
	SessionID    string          `json:"sessionId,omitempty"`
	Epoch        int64           `json:"epoch,omitempty"`
	WindowMs     int64           `json:"windowMs,omitempty"`
	HeartbeatMs  int64           `json:"heartbeatMs,omitempty"`
	LeaseTTLMs   int64           `json:"leaseTtlMs,omitempty"`
	Lease        *wire.Lease     `json:"lease,omitempty"`
	Leases       json.RawMessage `json:"leases,omitempty"`
	Lost         []Lost          `json:"lost,omitempty"`
	Problem      *Problem        `json:"problem,omitempty"`
	Name         string          `json:"name,omitempty"`
	Holder       string          `json:"holder,omitempty"`
	FencingToken int64           `json:"fencingToken,omitempty"`
	Reason       string          `json:"reason,omitempty"`
	To           string          `json:"to,omitempty"`
	WaitMs       int64           `json:"waitMs,omitempty"`
	Checkpoint   json.RawMessage `json:"checkpoint,omitempty"`
	ReserveMs    int64           `json:"reserveMs,omitempty"`
	Priority     int             `json:"priority,omitempty"`
	Preempt      bool            `json:"preempt,omitempty"`
	Operator     string          `json:"operator,omitempty"`

	// AcksBefore, on an answer, is how many acks the socket had read
	// before it (docs/contract.md §14, A4: only an ack read after a
	// holding's answer vouches for it).
	AcksBefore int64 `json:"-"`
}

// Lost is one lease a resume could not take back.
type Lost struct {
	Name         string `json:"name"`
	FencingToken int64  `json:"fencingToken"`
	Reason       string `json:"reason"`
}

// Problem is the problem+json object of an error message.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// Held is a holding as a resume sends it.
type Held struct {
	Name         string `json:"name"`
	Holder       string `json:"holder"`
	FencingToken int64  `json:"fencingToken"`
}

// Error is an error message answering a request.
type Error struct{ Problem Problem }

func (e *Error) Error() string {
	return fmt.Sprintf("session: %d %s: %s", e.Problem.Status, e.Problem.Code, e.Problem.Detail)
}

// Code returns the problem code of an *Error in err's chain, or "".
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Problem.Code
	}
	return ""
}

// ErrClosed is returned for requests on a socket that has ended.
var ErrClosed = errors.New("session: socket closed")

// Conn is one session socket. Its methods are safe for concurrent use.
type Conn struct {
	// URL is the base URL the socket was dialled to.
	URL string

	ws *websocket.Conn

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan Message
	beats   map[int64]time.Time // heartbeats sent and not yet acked: id → send time
	acked   time.Time           // send time of the latest acked heartbeat
	acks    int64               // acks read of heartbeats sent here
	lastRx  time.Time           // when the latest message arrived (or the socket opened)
	err     error               // why the socket ended, once done is closed
	onPush  func(Message)
	done    chan struct{}
	writeMu sync.Mutex
}

// Dial connects to base (http://host:port) and starts reading. onPush, if
// set, gets every message that answers no request (lost, revoked, yield,
// move, a socket-level error), on the reading goroutine.
func Dial(ctx context.Context, base string, header http.Header, onPush func(Message)) (*Conn, error) {
	return DialWith(ctx, nil, base, header, onPush)
}

// DialWith is Dial through client (nil: http.DefaultClient), for a
// transport of the caller's (the simulation's in-memory network).
func DialWith(ctx context.Context, client *http.Client, base string, header http.Header, onPush func(Message)) (*Conn, error) {
	u := strings.Replace(strings.TrimSuffix(base, "/"), "http", "ws", 1) + "/v1/sessions:connect"
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{Subprotocols: []string{Subprotocol}, HTTPHeader: header, HTTPClient: client})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("session: connect %s: %d: %w", u, resp.StatusCode, err)
		}
		return nil, fmt.Errorf("session: connect %s: %w", u, err)
	}
	ws.SetReadLimit(16 << 20)
	c := &Conn{URL: base, ws: ws, pending: map[int64]chan Message{}, beats: map[int64]time.Time{}, onPush: onPush, done: make(chan struct{}), lastRx: time.Now()}
	go c.read()
	return c, nil
}

// read delivers messages until the socket ends.
func (c *Conn) read() {
	var err error
	for {
		var raw []byte
		_, raw, err = c.ws.Read(context.Background())
		if err != nil {
			break
		}
		if re, ok := ackOf(raw); ok {
			c.deliver(Message{Type: "ack", Re: re})
			continue
		}
		var m Message
		if err = json.Unmarshal(raw, &m); err != nil {
			err = fmt.Errorf("session: malformed message %q: %w", raw, err)
			break
		}
		c.deliver(m)
	}
	// The socket is of no more use once its reader stops: close it, so
	// that neither the agent's heartbeats nor the instance wait on it.
	_ = c.ws.CloseNow()
	c.mu.Lock()
	c.err = err
	pending := c.pending
	c.pending = map[int64]chan Message{}
	c.mu.Unlock()
	close(c.done)
	for _, ch := range pending {
		close(ch)
	}
}

func (c *Conn) deliver(m Message) {
	c.mu.Lock()
	c.lastRx = time.Now()
	if m.Type == "ack" {
		if sent, ok := c.beats[m.Re]; ok {
			c.acks++
			if sent.After(c.acked) {
				c.acked = sent
			}
			for id := range c.beats { // an ack vouches for nothing older: drop those too
				if id <= m.Re {
					delete(c.beats, id)
				}
			}
		}
		c.mu.Unlock()
		return
	}
	ch, ok := c.pending[m.Re]
	if ok && m.Re != 0 {
		delete(c.pending, m.Re)
	}
	m.AcksBefore = c.acks
	push := c.onPush
	c.mu.Unlock()
	if ok && m.Re != 0 {
		ch <- m
		return
	}
	if push != nil {
		push(m)
	}
}

// Done is closed when the socket has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the socket ended (after Done).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// send writes m with a new id and returns the channel its answer comes on
// (nil for a heartbeat, whose ack is kept in the Conn).
func (c *Conn) send(ctx context.Context, m Message) (int64, chan Message, error) {
	// One writer at a time, from taking the id to the end of the write:
	// ids must increase along the socket (docs/contract.md §14), and two
	// senders that took 2 and 3 could otherwise write 3 first.
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	c.nextID++
	m.ID = c.nextID
	var ch chan Message
	if m.Type != "heartbeat" {
		ch = make(chan Message, 1)
		c.pending[m.ID] = ch
	} else {
		c.beats[m.ID] = time.Now()
	}
	c.mu.Unlock()
	var raw []byte
	var err error
	if m.Type == "heartbeat" {
		raw = heartbeatMessage(m.ID)
		// Its own write bound is the agent's silence check (Drop), so a
		// heartbeat need not cost the library a context callback: a load
		// generator sends thousands a second beside the instance.
		ctx = context.Background()
	} else if raw, err = json.Marshal(m); err != nil {
		return 0, nil, fmt.Errorf("session: encode %s: %w", m.Type, err)
	}
	err = c.ws.Write(ctx, websocket.MessageText, raw)
	if err != nil {
		c.mu.Lock()
		delete(c.pending, m.ID)
		c.mu.Unlock()
		return 0, nil, fmt.Errorf("session: send %s: %w", m.Type, err)
	}
	return m.ID, ch, nil
}

// Request sends m (its ID is set here) and waits for the answer with its
// id. An error message comes back as an *Error.
func (c *Conn) Request(ctx context.Context, m Message) (Message, error) {
	_, ch, err := c.send(ctx, m)
	if err != nil {
		return Message{}, err
	}
	select {
	case a, ok := <-ch:
		if !ok {
			return Message{}, fmt.Errorf("%s: %w", m.Type, ErrClosed)
		}
		if a.Type == "error" && a.Problem != nil {
			return a, &Error{Problem: *a.Problem}
		}
		return a, nil
	case <-ctx.Done():
		return Message{}, fmt.Errorf("session: %s: %w", m.Type, ctx.Err())
	}
}

// Heartbeat sends a heartbeat; its ack (when the instance sends one)
// moves Acked on.
func (c *Conn) Heartbeat(ctx context.Context) error {
	_, _, err := c.send(ctx, Message{Type: "heartbeat"})
	return err
}

// Acked returns the send time (with its monotonic reading) of the latest
// heartbeat the instance acked, or the zero time.
func (c *Conn) Acked() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked
}

// Acks returns how many acks of its heartbeats the socket has read.
func (c *Conn) Acks() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acks
}

// Silent returns how long nothing has arrived on the socket.
func (c *Conn) Silent() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Since(c.lastRx)
}

// Open sends open with the window (0: the service's default).
func (c *Conn) Open(ctx context.Context, window time.Duration) (Message, error) {
	return c.Request(ctx, Message{Type: "open", WindowMs: window.Milliseconds()})
}

// Resume sends resume of the session id, proposing epoch (one more than
// every epoch the agent has seen or proposed, docs/contract.md §14 A1),
// with the holdings held.
func (c *Conn) Resume(ctx context.Context, id string, epoch int64, held []Held) (Message, error) {
	raw, err := json.Marshal(held)
	if err != nil {
		return Message{}, fmt.Errorf("session: encode holdings: %w", err)
	}
	if held == nil {
		raw = []byte("[]")
	}
	return c.Request(ctx, Message{Type: "resume", SessionID: id, Epoch: epoch, Leases: raw})
}

// Close sends close, waits for closed (or ctx) and closes the socket.
func (c *Conn) Close(ctx context.Context) error {
	_, err := c.Request(ctx, Message{Type: "close"})
	_ = c.ws.Close(websocket.StatusNormalClosure, "")
	return err
}

// Drop closes the socket without a close message (a dropped connection).
func (c *Conn) Drop() { _ = c.ws.CloseNow() }

// LeaseOf returns the lease of a result message.
func LeaseOf(m Message) (lease.Lease, error) {
	if m.Lease == nil {
		return lease.Lease{}, fmt.Errorf("session: %s message without a lease", m.Type)
	}
	l, err := m.Lease.ToLease()
	if err != nil {
		return lease.Lease{}, fmt.Errorf("session: lease of %s: %w", m.Type, err)
	}
	return l, nil
}

// Leases returns the leases of a resumed message.
func Leases(m Message) ([]lease.Lease, error) {
	if len(m.Leases) == 0 {
		return nil, nil
	}
	var ws []wire.Lease
	if err := json.Unmarshal(m.Leases, &ws); err != nil {
		return nil, fmt.Errorf("session: leases of %s: %w", m.Type, err)
	}
	out := make([]lease.Lease, 0, len(ws))
	for i := range ws {
		l, err := ws[i].ToLease()
		if err != nil {
			return nil, fmt.Errorf("session: leases of %s: %w", m.Type, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// heartbeatMessage encodes heartbeat id in the one form the instance reads
// without a general parse: {"type":"heartbeat","id":N}.
func heartbeatMessage(id int64) []byte {
	b := make([]byte, 0, 40)
	b = append(b, `{"type":"heartbeat","id":`...)
	b = strconv.AppendInt(b, id, 10)
	return append(b, '}')
}

// ackOf reads an ack in the instance's encoding, {"re":N,"type":"ack"};
// anything else (false) takes the general parse.
func ackOf(raw []byte) (int64, bool) {
	digits, ok := bytes.CutPrefix(raw, []byte(`{"re":`))
	if !ok {
		return 0, false
	}
	if digits, ok = bytes.CutSuffix(digits, []byte(`,"type":"ack"}`)); !ok || len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	var n int64
	for _, d := range digits {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int64(d-'0')
	}
	return n, true
}
