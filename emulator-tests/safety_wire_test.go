package emulatortests

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/internal/rawsession"
)

// The wire of the frame proxies (safety_frames_test.go): WebSocket frames
// and HTTP heads as they pass, and the resumes they carried, kept for a
// replay on a new connection.

// capture is a resume a frameProxy carried, with the upgrade request of
// its socket and the type of the answer.
type capture struct {
	session     string
	epoch, id   int64
	head, frame []byte
	answer      string // resumed or error
}

// captures keeps the latest resumes of every frameProxy of a run.
type captures struct {
	mu   sync.Mutex
	list []capture
}

// captureKeep is how many resumes captures keeps.
const captureKeep = 64

func (cs *captures) add(c capture) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.list = append(cs.list, c)
	if len(cs.list) > captureKeep {
		cs.list = cs.list[len(cs.list)-captureKeep:]
	}
}

// resumed returns the captured resumes that were answered resumed (of
// session, or of every session when it is ""), latest first.
func (cs *captures) resumed(session string) []capture {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []capture
	for i := len(cs.list) - 1; i >= 0; i-- {
		if c := cs.list[i]; c.answer == "resumed" && (session == "" || c.session == session) {
			out = append(out, c)
		}
	}
	return out
}

// replayResume sends a captured resume, with its upgrade request, on a new
// connection to addr (host:port of an instance), and returns the answer to
// it: the duplicate of a frame on another socket of its session.
func replayResume(addr string, c capture, timeout time.Duration) (rawsession.Message, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return rawsession.Message{}, err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(c.head); err != nil {
		return rawsession.Message{}, err
	}
	br := bufio.NewReader(conn)
	head, err := readHead(br)
	if err != nil {
		return rawsession.Message{}, err
	}
	if !bytes.Contains(head[:bytes.IndexByte(head, '\n')+1], []byte(" 101 ")) {
		return rawsession.Message{}, fmt.Errorf("upgrade refused: %q", strings.TrimSpace(string(head)))
	}
	if _, err := conn.Write(c.frame); err != nil {
		return rawsession.Message{}, err
	}
	for {
		f, err := readFrame(br)
		if err != nil {
			return rawsession.Message{}, err
		}
		if m, ok := f.message(); ok && (m.Re == c.id || m.Re == 0 && m.Type == "error") {
			return m, nil
		}
	}
}

// frame is one WebSocket frame (RFC 6455 §5.2).
type frame struct {
	raw     []byte // as sent
	op      byte
	fin     bool
	payload []byte // unmasked
}

// message decodes a single-frame text message.
func (f frame) message() (rawsession.Message, bool) {
	var m rawsession.Message
	if f.op != 1 || !f.fin || json.Unmarshal(f.payload, &m) != nil {
		return m, false
	}
	return m, true
}

// maxFrame bounds a frame the proxy reads (the service's limit is 1 MiB).
const maxFrame = 16 << 20

// readFrame reads one frame.
func readFrame(r *bufio.Reader) (frame, error) {
	var h [14]byte
	if _, err := io.ReadFull(r, h[:2]); err != nil {
		return frame{}, err
	}
	f := frame{fin: h[0]&0x80 != 0, op: h[0] & 0x0f}
	n, hl := uint64(h[1]&0x7f), 2
	switch n {
	case 126:
		if _, err := io.ReadFull(r, h[2:4]); err != nil {
			return frame{}, err
		}
		n, hl = uint64(binary.BigEndian.Uint16(h[2:4])), 4
	case 127:
		if _, err := io.ReadFull(r, h[2:10]); err != nil {
			return frame{}, err
		}
		n, hl = binary.BigEndian.Uint64(h[2:10]), 10
	}
	masked := h[1]&0x80 != 0
	if masked {
		if _, err := io.ReadFull(r, h[hl:hl+4]); err != nil {
			return frame{}, err
		}
		hl += 4
	}
	if n > maxFrame {
		return frame{}, fmt.Errorf("frame of %d bytes", n)
	}
	f.raw = make([]byte, hl+int(n))
	copy(f.raw, h[:hl])
	if _, err := io.ReadFull(r, f.raw[hl:]); err != nil {
		return frame{}, err
	}
	f.payload = append([]byte(nil), f.raw[hl:]...)
	if masked {
		key := f.raw[hl-4 : hl]
		for i := range f.payload {
			f.payload[i] ^= key[i%4]
		}
	}
	return f, nil
}

// readHead reads an HTTP head up to and with its empty line.
func readHead(r *bufio.Reader) ([]byte, error) {
	var head []byte
	for {
		line, err := r.ReadSlice('\n')
		head = append(head, line...)
		if err != nil {
			return nil, err
		}
		if len(head) > 64<<10 {
			return nil, errors.New("HTTP head over 64 KiB")
		}
		if string(line) == "\r\n" {
			return head, nil
		}
	}
}
