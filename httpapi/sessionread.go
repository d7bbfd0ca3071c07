package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/coder/websocket"
)

// Errors of readMessage.
var (
	// errMessageTooBig is a message longer than cfg.MaxMessage.
	errMessageTooBig = errors.New("session: message too big")
	// errTooManyFrames is a ping or pong beyond the message rate.
	errTooManyFrames = errors.New("session: control frames beyond the message rate")
)

// readRefused is a piece of a message, n bytes, that the memory budget
// could not take as it arrived.
type readRefused struct{ n int64 }

func (e *readRefused) Error() string {
	return fmt.Sprintf("session: the memory budget cannot take %d more bytes of the message being read", e.n)
}

// smallMessage is the part of a message read into the socket's own buffer,
// covered by its fixed charge (socketCost): heartbeats and most requests
// fit, and are read with no allocation. A larger message is read in pieces
// of readChunk, each charged to the socket's account before it is read,
// so that a frame that arrives slowly (or never ends) holds no more than
// the budget gave it, and nothing is copied while it arrives
// (docs/contract.md §16).
const (
	smallMessage = 2 << 10
	readChunk    = 32 << 10
)

// smallBufs holds the buffers of smallMessage bytes that readMessage reads
// into: a socket holds one only while it acts on a message, not while it
// waits for the next.
var smallBufs = sync.Pool{New: func() any { b := make([]byte, smallMessage); return &b }}

// readMessage reads one whole message of at most cfg.MaxMessage bytes.
// One that fits in smallMessage is read into buf, a buffer of smallBufs
// taken once the message has begun to arrive, which the caller puts back
// once it has acted on the message. Beyond smallMessage its bytes are
// charged to the socket's account as they arrive; charged is what the
// caller gives back once the message has been acted on.
func (c *sessionConn) readMessage() (typ websocket.MessageType, data []byte, buf *[]byte, charged int64, err error) {
	// Not c.ctx: a cancellable context costs the library a callback per
	// read; serve closes the connection when c.ctx ends instead.
	typ, rd, err := c.ws.Reader(context.Background())
	if err != nil {
		return 0, nil, nil, 0, err
	}
	buf = smallBufs.Get().(*[]byte)
	n, err := io.ReadFull(rd, (*buf)[:smallMessage])
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return typ, (*buf)[:n], buf, 0, nil
	case err != nil:
		smallBufs.Put(buf)
		return 0, nil, nil, 0, err
	}
	data, charged, err = c.readLarge(rd, (*buf)[:n])
	smallBufs.Put(buf) // readLarge copied it
	return typ, data, nil, charged, err
}

// readLarge reads the rest of a message larger than smallMessage, whose
// first bytes are head, in whole pieces, each charged before it is read.
func (c *sessionConn) readLarge(rd io.Reader, head []byte) (data []byte, charged int64, err error) {
	chunks := [][]byte{head}
	total := int64(len(head))
	for {
		if total > c.cfg.MaxMessage {
			return nil, charged, errMessageTooBig
		}
		size := min(int64(readChunk), c.cfg.MaxMessage+1-total)
		if !c.acct.Grow(size) {
			return nil, charged, &readRefused{n: size}
		}
		charged += size
		piece := make([]byte, size)
		n, err := io.ReadFull(rd, piece)
		chunks = append(chunks, piece[:n])
		total += int64(n)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, charged, err
		}
	}
	if total > c.cfg.MaxMessage {
		return nil, charged, errMessageTooBig
	}
	// The message whole, for the parser: charged too, the pieces given
	// back as it is made.
	if !c.acct.Grow(total) {
		return nil, charged, &readRefused{n: total}
	}
	data = make([]byte, 0, total)
	for _, p := range chunks {
		data = append(data, p...)
	}
	c.acct.Shrink(charged)
	return data, total, nil
}
