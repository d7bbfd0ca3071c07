package httpapi

import (
	"context"
	"fmt"
	"time"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/internal/wire"
)

// send queues one message. A socket whose queue already holds the out
// buffer's bytes (so it holds at most the buffer and one message more: a
// resumed answer larger than the buffer still goes out), or whose bytes
// the memory budget cannot take, is closed at once (1013): its session
// lives on and can be resumed (docs/contract.md §14 Limits).
func (c *sessionConn) send(v any) {
	b, err := wire.Marshal(v)
	if err != nil {
		c.a.log.Error("session: encoding a message failed", "err", err)
		return
	}
	c.sendEncoded(b)
}

// sendEncoded queues one encoded message, as send does.
func (c *sessionConn) sendEncoded(b []byte) {
	n := int64(len(b))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	switch {
	case c.queued >= c.cfg.OutBuffer:
		c.overflowLocked(codeResourceExhausted, fmt.Sprintf("the client reads too slowly: more than %d bytes of messages queued (LEASESVC_SESSION_OUT_BUFFER)", c.cfg.OutBuffer))
		return
	case !c.acct.Grow(n):
		c.overflowLocked(codeResourceExhausted, "the client reads too slowly: the instance's memory budget cannot queue more for this caller (LEASESVC_MEMORY_PER_CALLER, LEASESVC_MEMORY_BUDGET)")
		return
	}
	c.queue = append(c.queue, b)
	c.queued += n
	if !c.inline {
		c.kickWriterLocked()
	}
}

// kickWriterLocked starts a writer (writeOut) for what is queued, unless a
// goroutine is writing it (and will write it all) or one was started and
// has not yet begun; c.mu held. A socket has no writer goroutine while
// nothing waits to be written: a session holding still costs one
// goroutine, its reader (docs/performance.md).
func (c *sessionConn) kickWriterLocked() {
	if c.writing || c.spawned || c.closeSent {
		return
	}
	c.spawned = true
	go c.writeOut()
}

// overflowLocked closes a socket whose client does not read: what is queued
// is dropped and given back, and the socket closes now (1013) with reason;
// c.mu held.
func (c *sessionConn) overflowLocked(outcome, reason string) {
	c.closed = true
	c.dropLocked()
	c.closeCode, c.closeReason = websocket.StatusTryAgainLater, reason
	c.kickWriterLocked()
	c.auditClose(c.sess, outcome, websocket.StatusTryAgainLater, reason)
	go c.closeNow(websocket.StatusTryAgainLater, reason)
}

// dropLocked forgets the queued messages and gives their bytes back; c.mu
// held.
func (c *sessionConn) dropLocked() {
	c.acct.Shrink(c.queued)
	c.queue, c.queued = nil, 0
}

// writeOut writes what is queued, in order, and then, once the socket is
// shut and its queue is out, the close it was shut with; it ends when the
// queue is empty (kickWriterLocked starts another when more is queued).
func (c *sessionConn) writeOut() {
	c.mu.Lock()
	c.spawned = false
	c.mu.Unlock()
	if !c.flush() {
		return
	}
	c.mu.Lock()
	send := c.closed && len(c.queue) == 0 && !c.writing && !c.closeSent
	if send {
		c.closeSent = true
	}
	code, reason := c.closeCode, c.closeReason
	c.mu.Unlock()
	if !send {
		return
	}
	if code == 0 {
		code = websocket.StatusNormalClosure
	}
	c.closeNow(code, reason)
	c.finish()
}

// finish says that nothing more will be written on the socket (serve
// waits for it).
func (c *sessionConn) finish() { c.finished.Do(func() { close(c.done) }) }

// flush writes the queued messages, in order, from the calling goroutine,
// unless another goroutine is writing them (which then writes them all);
// false when a write failed and the socket is done. The reader calls it
// after each message, so that a heartbeat's ack is written without waking
// the writer: one goroutine and no hand-off per heartbeat (docs/performance.md).
func (c *sessionConn) flush() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writing {
		c.inline = false // the goroutine writing drains the queue to its end
		return true
	}
	c.writing = true
	defer func() { // under c.mu, before the Unlock
		c.writing, c.inline = false, false
		if c.closed {
			c.kickWriterLocked() // it sends the close once the queue is out
		}
	}()
	for len(c.queue) > 0 {
		b := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		c.mu.Unlock()
		err := c.writeMessage(b)
		c.mu.Lock()
		if n := int64(len(b)); c.queued >= n { // dropLocked may have forgotten it
			c.queued -= n
			c.acct.Shrink(n)
		}
		if err != nil {
			c.cancel()
			c.closed, c.closeSent = true, true
			c.dropLocked()
			c.finish()
			return false
		}
	}
	return true
}

// flushReader is the reader's flush after a message: it writes the queue
// itself only when that is the one small message it has just queued (a
// heartbeat's ack, mostly), so that a client that stops reading blocks a
// writer, never the reader, which goes on reading heartbeats and pings;
// anything more is left to a writer (kickWriterLocked).
func (c *sessionConn) flushReader() bool {
	c.mu.Lock()
	if len(c.queue) <= 1 && c.queued <= smallMessage {
		c.mu.Unlock()
		return c.flush()
	}
	c.inline = false
	c.kickWriterLocked()
	c.mu.Unlock()
	return true
}

// writeMessage writes one message within Limits.WriteTimeout, bounded by
// the connection's write deadline, set for the write and cleared after it
// (the library writes closes and pongs of its own on the connection, at
// any time): two timer updates, where a context per write would cost a
// timer and a library callback each (websocket.Conn.Write). A closing
// socket's deadline (closeNow) is left as it is.
func (c *sessionConn) writeMessage(b []byte) error {
	wt := c.a.cfg.Limits.WriteTimeout
	if c.netConn == nil || wt <= 0 {
		ctx, cancel := context.WithTimeout(c.ctx, max(wt, time.Second))
		defer cancel()
		return c.ws.Write(ctx, websocket.MessageText, b)
	}
	if c.closing.Load() {
		return c.ws.Write(context.Background(), websocket.MessageText, b)
	}
	_ = c.netConn.SetWriteDeadline(time.Now().Add(wt))
	err := c.ws.Write(context.Background(), websocket.MessageText, b)
	if !c.closing.Load() {
		_ = c.netConn.SetWriteDeadline(time.Time{})
	}
	return err
}
