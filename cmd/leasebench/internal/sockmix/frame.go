package sockmix

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The WebSocket frames of RFC 6455 §5, written by hand, so that a mix can
// send what no library sends: a frame whose header declares more payload
// than ever follows (HalfFrames), or a large message streamed from shared
// buffers without a copy per socket.

// Opcodes of RFC 6455 §5.2.
const (
	OpContinuation byte = 0x0
	OpText         byte = 0x1
	OpBinary       byte = 0x2
	OpClose        byte = 0x8
	OpPing         byte = 0x9
	OpPong         byte = 0xA
)

// AppendFrameHeader appends to dst the header of a client frame: FIN when
// fin, opcode op, a payload length of n (in the 7-bit, 16-bit or 64-bit
// form, the shortest that holds it) and the masking key (a client's frames
// are always masked).
func AppendFrameHeader(dst []byte, fin bool, op byte, n uint64, key [4]byte) []byte {
	b0 := op & 0x0F
	if fin {
		b0 |= 0x80
	}
	switch {
	case n <= 125:
		dst = append(dst, b0, 0x80|byte(n))
	case n <= 0xFFFF:
		dst = append(dst, b0, 0x80|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, b0, 0x80|127)
		dst = binary.BigEndian.AppendUint64(dst, n)
	}
	return append(dst, key[:]...)
}

// NewKey is a fresh random masking key.
func NewKey() [4]byte {
	var k [4]byte
	_, _ = rand.Read(k[:]) // crypto/rand.Read never fails (Go 1.24)
	return k
}

// MaskWriter writes a frame's payload masked with its key (byte i XORed
// with key[i mod 4], counted from the payload's first byte across Write
// calls), through a buffer of its own: the caller's bytes are never
// changed, so one buffer can feed any number of sockets.
type MaskWriter struct {
	w   io.Writer
	key [4]byte
	off uint64 // payload bytes masked so far
	buf []byte
}

// NewMaskWriter masks with key onto w, bufSize bytes at a time (at least
// 64).
func NewMaskWriter(w io.Writer, key [4]byte, bufSize int) *MaskWriter {
	return &MaskWriter{w: w, key: key, buf: make([]byte, max(bufSize, 64))}
}

// Write masks p and writes it; n counts p's bytes written.
func (m *MaskWriter) Write(p []byte) (n int, err error) {
	for len(p) > 0 {
		chunk := m.buf[:min(len(p), len(m.buf))]
		Mask(chunk, p[:len(chunk)], m.key, m.off)
		k, err := m.w.Write(chunk)
		n += k
		m.off += uint64(k)
		if err != nil {
			return n, err
		}
		p = p[len(chunk):]
	}
	return n, nil
}

// Mask sets dst[i] to src[i] XOR key[(off+i) mod 4], for the bytes of
// src, of which dst must hold as many (dst may be src).
func Mask(dst, src []byte, key [4]byte, off uint64) {
	dst = dst[:len(src)]
	// Eight bytes at a time with the key rotated to off.
	var k8 [8]byte
	for i := range k8 {
		k8[i] = key[(off+uint64(i))%4]
	}
	word := binary.LittleEndian.Uint64(k8[:])
	i := 0
	for ; i+8 <= len(src); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], binary.LittleEndian.Uint64(src[i:])^word)
	}
	for ; i < len(src); i++ {
		dst[i] = src[i] ^ key[(off+uint64(i))%4]
	}
}

// WriteFrame writes one whole client frame (FIN set) of opcode op whose
// payload is the parts one after the other, masked with a fresh key.
func WriteFrame(w io.Writer, op byte, parts ...[]byte) error {
	var n uint64
	for _, p := range parts {
		n += uint64(len(p))
	}
	return WritePartialFrame(w, op, n, parts...)
}

// WritePartialFrame writes a client text or binary frame (FIN set) whose
// header declares declared bytes of payload, then the parts, masked with
// a fresh key: when they hold fewer bytes than declared the frame stays
// unfinished, and the peer waits for the rest.
func WritePartialFrame(w io.Writer, op byte, declared uint64, parts ...[]byte) error {
	var sum uint64
	for _, p := range parts {
		sum += uint64(len(p))
	}
	if sum > declared {
		return fmt.Errorf("frame: %d bytes of payload, more than the %d declared", sum, declared)
	}
	key := NewKey()
	hdr := AppendFrameHeader(make([]byte, 0, 14+min(sum, smallFrame)), true, op, declared, key)
	if sum <= smallFrame { // one write, one allocation
		buf := hdr
		for _, p := range parts {
			buf = append(buf, p...)
		}
		Mask(buf[len(hdr):], buf[len(hdr):], key, 0)
		if _, err := w.Write(buf); err != nil {
			return fmt.Errorf("frame: %w", err)
		}
		return nil
	}
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("frame header: %w", err)
	}
	mw := NewMaskWriter(w, key, 32<<10)
	for _, p := range parts {
		if _, err := mw.Write(p); err != nil {
			return fmt.Errorf("frame payload: %w", err)
		}
	}
	return nil
}

// smallFrame is the largest payload WritePartialFrame masks in one buffer
// with its header.
const smallFrame = 8 << 10

// ErrFrameTooLarge is ReadFrame's error for a frame beyond its limit.
var ErrFrameTooLarge = errors.New("frame: payload beyond the limit")

// ReadFrame reads one frame from the service (unmasked, as a server's
// are; a masked one is unmasked) of at most limit bytes of payload.
func ReadFrame(r *bufio.Reader, limit int) (fin bool, op byte, payload []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return false, 0, nil, err
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0F
	masked := h[1]&0x80 != 0
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return false, 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return false, 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	var key [4]byte
	if masked {
		if _, err := io.ReadFull(r, key[:]); err != nil {
			return false, 0, nil, err
		}
	}
	if n > uint64(limit) {
		return false, 0, nil, fmt.Errorf("%w: %d bytes, at most %d", ErrFrameTooLarge, n, limit)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return false, 0, nil, err
	}
	if masked {
		Mask(payload, payload, key, 0)
	}
	return fin, op, payload, nil
}

// CloseCode is the status code of a close frame's payload; 1005 (none
// given) when it carries none.
func CloseCode(payload []byte) int {
	if len(payload) < 2 {
		return 1005
	}
	return int(binary.BigEndian.Uint16(payload))
}
