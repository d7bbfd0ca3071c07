package sessionsim

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"time"
)

// Msg is the part of a session message (docs/contract.md §14) that the
// simulation reads off the wire, either direction.
type Msg struct {
	Type         string    `json:"type"`
	ID           int64     `json:"id"`
	Re           int64     `json:"re"`
	Epoch        int64     `json:"epoch"`
	WindowMs     int64     `json:"windowMs"`
	Name         string    `json:"name"`
	Holder       string    `json:"holder"`
	FencingToken int64     `json:"fencingToken"`
	Reason       string    `json:"reason"`
	Lease        *Holding  `json:"lease"`
	Leases       []Holding `json:"leases"`
	Lost         []Holding `json:"lost"`
	Problem      *struct{} `json:"problem"`
}

// Holding is a lease name with its holder and fencing token, as the
// messages carry it.
type Holding struct {
	Name         string `json:"name"`
	Holder       string `json:"holder"`
	FencingToken int64  `json:"fencingToken"`
}

// unit is what a pipe delivers at once: the HTTP upgrade request or
// response, one WebSocket frame, or raw bytes after a refused upgrade.
type unit struct {
	b     []byte
	frame bool      // a WebSocket frame (holds and frame faults apply)
	msg   *Msg      // the message of a text frame, nil otherwise
	at    time.Time // when it arrives (the network's latency after it was sent)
}

// framing cuts a byte stream into units: first the HTTP head (up to the
// blank line), then, after a 101 answer, WebSocket frames (RFC 6455 §5.2);
// after any other answer the rest passes as raw bytes.
type framing struct {
	partial []byte
	state   int // 0: the HTTP head; 1: frames; 2: raw
}

// feed adds b and returns the units it completed.
func (f *framing) feed(b []byte, up bool) []unit {
	f.partial = append(f.partial, b...)
	var out []unit
	for len(f.partial) > 0 {
		switch f.state {
		case 0:
			i := bytes.Index(f.partial, []byte("\r\n\r\n"))
			if i < 0 {
				return out
			}
			head := f.take(i + 4)
			f.state = 1
			if !up && !bytes.HasPrefix(head, []byte("HTTP/1.1 101")) {
				f.state = 2
			}
			out = append(out, unit{b: head})
		case 1:
			n, ok := frameLen(f.partial)
			if !ok {
				return out
			}
			fr := f.take(n)
			out = append(out, unit{b: fr, frame: true, msg: parseFrame(fr)})
		default:
			out = append(out, unit{b: f.take(len(f.partial))})
		}
	}
	return out
}

// take removes and returns the first n bytes of the partial stream.
func (f *framing) take(n int) []byte {
	b := append([]byte(nil), f.partial[:n]...)
	f.partial = f.partial[n:]
	if len(f.partial) == 0 {
		f.partial = nil
	}
	return b
}

// frameLen is the length of the frame at the start of b, once b holds all
// of it.
func frameLen(b []byte) (int, bool) {
	if len(b) < 2 {
		return 0, false
	}
	n, plen := 2, int(b[1]&0x7f)
	switch plen {
	case 126:
		if len(b) < 4 {
			return 0, false
		}
		plen, n = int(binary.BigEndian.Uint16(b[2:4])), 4
	case 127:
		if len(b) < 10 {
			return 0, false
		}
		plen, n = int(binary.BigEndian.Uint64(b[2:10])), 10
	}
	if b[1]&0x80 != 0 {
		n += 4
	}
	if len(b) < n+plen {
		return 0, false
	}
	return n + plen, true
}

// parseFrame decodes the message of a whole, final text frame; nil for
// any other frame (control frames, or a payload that is not a message).
func parseFrame(fr []byte) *Msg {
	if fr[0] != 0x81 { // FIN and opcode text: the library sends each message as one frame
		return nil
	}
	n, plen := 2, int(fr[1]&0x7f)
	switch plen {
	case 126:
		n = 4
	case 127:
		n = 10
	}
	payload := fr[n:]
	if fr[1]&0x80 != 0 {
		key := fr[n : n+4]
		payload = append([]byte(nil), fr[n+4:]...)
		for i := range payload {
			payload[i] ^= key[i%4]
		}
	}
	var m Msg
	if json.Unmarshal(payload, &m) != nil {
		return nil
	}
	return &m
}
