package httpapi_test

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/membudget"
	"github.com/leasesvc/leasesvc/session"
)

// rawSocket is a session socket spoken by hand, frame by frame, so that a
// test can send what no WebSocket library sends: half a frame, an unmasked
// one, a flood of pings.
type rawSocket struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

// dialRaw upgrades a connection to srv's session route as principal.
func dialRaw(t *testing.T, srv *httptest.Server, principal string) *rawSocket {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	req := "GET " + httpapi.SessionsPath + " HTTP/1.1\r\nHost: " + strings.TrimPrefix(srv.URL, "http://") +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " +
		base64.StdEncoding.EncodeToString(key) + "\r\nSec-WebSocket-Protocol: " + httpapi.SessionSubprotocol + "\r\n"
	if principal != "" {
		req += "Authorization: Bearer " + principal + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	return &rawSocket{t: t, c: c, br: br}
}

// header writes a frame header of opcode op declaring n payload bytes;
// masked with a zero key (the payload then goes as is) unless unmasked.
func (s *rawSocket) header(op byte, n int, unmasked bool) {
	s.t.Helper()
	h := []byte{0x80 | op}
	mask := byte(0x80)
	if unmasked {
		mask = 0
	}
	switch {
	case n < 126:
		h = append(h, mask|byte(n))
	case n < 1<<16:
		h = append(h, mask|126, byte(n>>8), byte(n))
	default:
		h = append(h, mask|127)
		h = binary.BigEndian.AppendUint64(h, uint64(n))
	}
	if !unmasked {
		h = append(h, 0, 0, 0, 0)
	}
	s.write(h)
}

func (s *rawSocket) write(b []byte) {
	s.t.Helper()
	_ = s.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := s.c.Write(b); err != nil {
		s.t.Fatalf("write: %v", err)
	}
}

// text sends one whole text message.
func (s *rawSocket) text(msg string) {
	s.t.Helper()
	s.header(0x1, len(msg), false)
	s.write([]byte(msg))
}

// closeCode reads frames until the server's close frame and returns its
// status code; 0 when the connection ended without one.
func (s *rawSocket) closeCode() int {
	s.t.Helper()
	_ = s.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		var h [2]byte
		if _, err := io.ReadFull(s.br, h[:]); err != nil {
			return 0
		}
		n := int(h[1] & 0x7f)
		switch n {
		case 126:
			var l [2]byte
			if _, err := io.ReadFull(s.br, l[:]); err != nil {
				return 0
			}
			n = int(binary.BigEndian.Uint16(l[:]))
		case 127:
			var l [8]byte
			if _, err := io.ReadFull(s.br, l[:]); err != nil {
				return 0
			}
			n = int(binary.BigEndian.Uint64(l[:]))
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(s.br, p); err != nil {
			return 0
		}
		if h[0]&0x0f == 0x8 {
			if len(p) < 2 {
				return 1005
			}
			return int(binary.BigEndian.Uint16(p))
		}
	}
}

// TestSessionFrameChargedAsItArrives: a message is charged to the memory
// budget as its bytes arrive, not once it is whole, so a frame that
// declares 1 MiB and stalls after part of it holds only what the budget
// gave it; past the caller's share the socket is closed (1013) and every
// byte is given back (docs/contract.md §16).
func TestSessionFrameChargedAsItArrives(t *testing.T) {
	sink, log := newAuditSink()
	budget, err := membudget.New(1<<30, httpapi.SessionCost+256<<10)
	if err != nil {
		t.Fatal(err)
	}
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{Audit: log, Limits: httpapi.Limits{Memory: budget}})
	done := socketsDone(t, in.srv)
	s := dialRaw(t, in.srv, "")
	s.text(`{"type":"open","id":1,"windowMs":1000}`)
	base := budget.Stats().Used
	s.header(0x1, 1<<20, false)
	s.write([]byte(`{"type":"heartbeat","id":2,"pad":"` + strings.Repeat(" ", 100<<10)))
	deadline := time.Now().Add(20 * time.Second)
	for budget.Stats().Used < base+100<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("100 KiB of a half-sent frame read, the budget holds %d bytes beyond the session's %d; want them charged", budget.Stats().Used-base, base)
		}
		time.Sleep(time.Millisecond)
	}
	// The rest of the share is 256 KiB: the next 300 KiB cannot be taken
	// (the server may close before it has read them all).
	_ = s.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, _ = s.c.Write([]byte(strings.Repeat(" ", 300<<10)))
	if code := s.closeCode(); code != 1013 {
		t.Fatalf("a message past the caller's share closed with %d; want 1013", code)
	}
	if l := sink.wait(t, "session_socket_close"); l.Outcome != "resource_exhausted" || !strings.Contains(l.Detail, "LEASESVC_MEMORY_PER_CALLER") {
		t.Fatalf("audit line %+v", l)
	}
	waitDone(t, done, 1)
	if u := budget.Stats().Used; u != 0 {
		t.Fatalf("the budget holds %d bytes after the socket ended; want 0", u)
	}
}

// TestSessionControlFramesCountAgainstTheRate: pings and pongs take from
// the socket's message rate like any other message; a flood of them ends
// the socket with an audit line (docs/contract.md §16).
func TestSessionControlFramesCountAgainstTheRate(t *testing.T) {
	sink, log := newAuditSink()
	in := newSessionInstance(t, memory.New(), session.Config{MessageRate: 10}, httpapi.Config{Audit: log})
	s := dialRaw(t, in.srv, "")
	s.text(`{"type":"open","id":1,"windowMs":1000}`)
	ping := []byte{0x89, 0x80, 0, 0, 0, 0} // a masked ping, no payload
	_ = s.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	for range 200 {
		if _, err := s.c.Write(ping); err != nil {
			break // closed already
		}
	}
	if code := s.closeCode(); code != 0 && code != 1008 {
		t.Fatalf("a ping flood ended the socket with %d; want it dropped or 1008", code)
	}
	if l := sink.wait(t, "session_socket_close"); l.Outcome != "resource_exhausted" || !strings.Contains(l.Detail, "pings") {
		t.Fatalf("audit line %+v", l)
	}
}

// TestSessionUnmaskedFrameIsAProtocolError: a client frame without a mask
// breaks RFC 6455 (§5.1): the socket closes with 1002, not 1000.
func TestSessionUnmaskedFrameIsAProtocolError(t *testing.T) {
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{})
	s := dialRaw(t, in.srv, "")
	msg := `{"type":"open","id":1,"windowMs":1000}`
	s.header(0x1, len(msg), true)
	s.write([]byte(msg))
	if code := s.closeCode(); code != 1002 {
		t.Fatalf("an unmasked frame closed the socket with %d; want 1002", code)
	}
}

// TestSessionHeartbeatReadsWithoutCharge: small messages are read into
// the socket's own buffer, covered by its fixed charge: heartbeats move
// nothing in the budget but the acks being written.
func TestSessionHeartbeatReadsWithoutCharge(t *testing.T) {
	budget, err := membudget.New(1<<30, 0)
	if err != nil {
		t.Fatal(err)
	}
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{Limits: httpapi.Limits{Memory: budget}})
	w := dial(t, in.srv.URL, "")
	w.open(1000)
	before := budget.Stats().Used
	for range 20 {
		w.ackedHeartbeat()
	}
	// Only the out queue moves: an ack or the opened answer being written.
	if after := budget.Stats().Used; after > before+1<<10 || after < httpapi.SessionCost {
		t.Fatalf("20 heartbeats moved the budget from %d to %d", before, after)
	}
}
