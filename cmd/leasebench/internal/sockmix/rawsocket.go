package sockmix

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// upgradeRequest is a session upgrade request with token.
func upgradeRequest(addr, token string) string {
	return "GET /v1/sessions:connect HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: " + Subprotocol + "\r\n" +
		"Authorization: Bearer " + token + "\r\n\r\n"
}

// upgrade sends a session upgrade request with token over a new
// connection; when it is answered 101 it returns the connection and the
// reader the answer was read through (which may hold the first frames).
func upgrade(ctx context.Context, addr, token string) (net.Conn, *bufio.Reader, int, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("dial %s: %w", addr, err)
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write([]byte(upgradeRequest(addr, token))); err != nil {
		_ = conn.Close()
		return nil, nil, 0, fmt.Errorf("upgrade request: %w", err)
	}
	br := bufio.NewReaderSize(conn, 4<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		_ = conn.Close()
		return nil, nil, 0, fmt.Errorf("upgrade answer: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		_ = conn.Close()
		return nil, nil, resp.StatusCode, nil
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, br, resp.StatusCode, nil
}

// RawSocket is a session socket driven frame by frame over its TCP
// connection (frames written by WriteFrame and WritePartialFrame).
type RawSocket struct {
	conn net.Conn
	br   *bufio.Reader

	wmu    sync.Mutex // one frame at a time
	lastID int64      // the id of the last request written
}

// DialRaw upgrades a session socket at addr with token. It returns the
// upgrade's status, and the socket when that is 101.
func DialRaw(ctx context.Context, addr, token string) (*RawSocket, int, error) {
	conn, br, st, err := upgrade(ctx, addr, token)
	if err != nil || conn == nil {
		return nil, st, err
	}
	return &RawSocket{conn: conn, br: br}, st, nil
}

// Message is the envelope of a message from the service.
type Message struct {
	Type    string `json:"type"`
	Re      int64  `json:"re"`
	Problem *struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
	} `json:"problem"`
}

// Key names the message for counting: its type, and for an error its
// problem's status and code ("error 429 resource_exhausted").
func (m Message) Key() string {
	if m.Type == "error" && m.Problem != nil {
		return fmt.Sprintf("error %d %s", m.Problem.Status, m.Problem.Code)
	}
	return m.Type
}

// Open sends open (windowMs 0: the service's default window) and reads
// its answer: a RefusedError (Key "open") when it is not opened.
func (s *RawSocket) Open(windowMs int) error {
	msg := `{"type":"open","id":1}`
	if windowMs > 0 {
		msg = fmt.Sprintf(`{"type":"open","id":1,"windowMs":%d}`, windowMs)
	}
	_ = s.conn.SetDeadline(time.Now().Add(30 * time.Second))
	defer func() { _ = s.conn.SetDeadline(time.Time{}) }()
	s.wmu.Lock()
	s.lastID = 1
	s.wmu.Unlock()
	if err := s.WriteText([]byte(msg)); err != nil {
		return err
	}
	for {
		op, data, err := s.ReadMessage(1 << 20)
		if err != nil {
			return fmt.Errorf("open: %w", err)
		}
		if op != OpText {
			continue
		}
		var m Message
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("open: answer %.200q: %w", data, err)
		}
		if m.Type != "opened" {
			return &RefusedError{Key: "open", Detail: string(data)}
		}
		return nil
	}
}

// WriteText writes one text message, the parts one after the other, as
// one frame.
func (s *RawSocket) WriteText(parts ...[]byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return WriteFrame(s.conn, OpText, parts...)
}

// Request writes one request, the parts build makes for the socket's next
// id (ids increase along the socket, as docs/contract.md §14 asks),
// within timeout.
func (s *RawSocket) Request(timeout time.Duration, build func(id int64) [][]byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.lastID++
	_ = s.conn.SetWriteDeadline(time.Now().Add(timeout))
	defer func() { _ = s.conn.SetWriteDeadline(time.Time{}) }()
	return WriteFrame(s.conn, OpText, build(s.lastID)...)
}

// WritePartial writes a text frame that declares declared bytes of
// payload and sends only the parts, within timeout: after it the socket can send nothing
// more (the peer reads the rest of the frame from whatever follows).
func (s *RawSocket) WritePartial(timeout time.Duration, declared uint64, parts ...[]byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.conn.SetWriteDeadline(time.Now().Add(timeout))
	defer func() { _ = s.conn.SetWriteDeadline(time.Time{}) }()
	return WritePartialFrame(s.conn, OpText, declared, parts...)
}

// ReadMessage reads the next message from the service: a text or binary
// one (its fragments joined, at most limit bytes), or a close frame (op
// OpClose, its payload). A ping is answered with a pong and skipped.
func (s *RawSocket) ReadMessage(limit int) (op byte, data []byte, err error) {
	for {
		fin, fop, payload, err := ReadFrame(s.br, limit)
		if err != nil {
			return 0, nil, err
		}
		switch fop {
		case OpPing:
			s.wmu.Lock()
			err := WriteFrame(s.conn, OpPong, payload)
			s.wmu.Unlock()
			if err != nil {
				return 0, nil, err
			}
			continue
		case OpPong:
			continue
		case OpClose:
			return OpClose, payload, nil
		case OpContinuation:
			if op == 0 {
				return 0, nil, errors.New("frame: a continuation with no message begun")
			}
		default:
			op = fop
		}
		if len(data)+len(payload) > limit {
			return 0, nil, ErrFrameTooLarge
		}
		data = append(data, payload...)
		if fin {
			return op, data, nil
		}
	}
}

// Watch reads the socket until it ends, giving each text message to
// onMessage (nil: none), and returns how it ended: the close code the
// service sent ("1009"), or "dropped" when the connection ended without
// one.
func (s *RawSocket) Watch(onMessage func(Message)) string {
	for {
		op, data, err := s.ReadMessage(4 << 20)
		if err != nil {
			return "dropped"
		}
		switch op {
		case OpClose:
			return strconv.Itoa(CloseCode(data))
		case OpText:
			if onMessage != nil {
				var m Message
				if json.Unmarshal(data, &m) == nil {
					onMessage(m)
				}
			}
		}
	}
}

// Close closes the connection from this end.
func (s *RawSocket) Close() { _ = s.conn.Close() }
