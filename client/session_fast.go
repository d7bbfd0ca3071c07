package client

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// The heartbeat's path, both ways, without what it need not pay: the
// heartbeat is encoded by hand in the one form the service reads on its
// fast path, its ack is recognised in the one form the service writes,
// reads and writes go with contexts that cannot end (the socket's library
// then arms no context.AfterFunc per frame), a socket is closed once when
// the session ends (one AfterFunc per socket), and a write is bounded by
// a watchdog armed at most once per RequestTimeout rather than a timer
// per write. Everything else takes the general path, whose behaviour is
// the same (docs/contract.md §14).

const (
	// heartbeatPrefix and heartbeatSuffix frame a heartbeat's id in the
	// canonical form {"type":"heartbeat","id":N}, which the service reads
	// without its general decoder.
	heartbeatPrefix = `{"type":"heartbeat","id":`
	heartbeatSuffix = `}`
	// ackPrefix and ackSuffix frame the id an ack answers, as the service
	// encodes it: {"re":N,"type":"ack"}.
	ackPrefix = `{"re":`
	ackSuffix = `,"type":"ack"}`
	// keptReadBuffer is the largest read buffer a socket keeps for the
	// next message; a larger answer's buffer is left to the collector.
	keptReadBuffer = 4 << 10
)

// sockFast is what a socket keeps for the heartbeat's fast paths.
type sockFast struct {
	// hb is where the heartbeat is encoded (guarded by sconn.wmu).
	hb [48]byte
	// rbuf is the reader's buffer, reused for every message that fits in
	// keptReadBuffer (only the reader touches it).
	rbuf []byte
	// unclose stops the closing of the socket at the session's end
	// (Session.watch).
	unclose func() bool
	// wdog closes the socket when a write has gone on for RequestTimeout;
	// it is armed (wdogArmed) by a write that finds it unarmed, and at
	// each firing it re-arms itself for the write in progress, if any.
	wdog      *time.Timer
	wdogArmed atomic.Bool
	// wstart is when the write in progress began (monoNow), 0 while none.
	wstart atomic.Int64
}

// sentBeat is a heartbeat awaiting its ack: its id and local send time.
type sentBeat struct {
	id   int64
	sent time.Time
}

// monoBase anchors the monotonic readings of the write watchdogs.
var monoBase = time.Now()

// monoNow is the monotonic time since monoBase, in nanoseconds, never 0.
func monoNow() int64 { return int64(time.Since(monoBase)) | 1 }

// watch makes sc close when the session ends, and sets its write
// watchdog up (unarmed).
func (s *Session) watch(sc *sconn) {
	limit := s.c.cfg.RequestTimeout
	sc.wdog = time.AfterFunc(time.Duration(1<<63-1), func() { sc.bark(limit) })
	sc.wdog.Stop()
	sc.unclose = context.AfterFunc(s.ctx, func() { _ = sc.ws.CloseNow() })
}

// unwatch stops the closing of sc at the session's end: its reader
// stopped, and closes it.
func (sc *sconn) unwatch() { sc.unclose() }

// bark is the write watchdog's firing: it closes the socket when the write
// in progress began limit ago or earlier, re-arms itself for the rest of
// limit when one began later, and is unarmed when none is in progress.
func (sc *sconn) bark(limit time.Duration) {
	for {
		start := sc.wstart.Load()
		if start == 0 {
			sc.wdogArmed.Store(false)
			// A write that began meanwhile may have found it armed.
			if sc.wstart.Load() == 0 || !sc.wdogArmed.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		if left := limit - time.Duration(monoNow()-start); left > 0 {
			sc.wdog.Reset(left)
			return
		}
		_ = sc.ws.CloseNow()
		return
	}
}

// send writes the message b on sc (sc.wmu is held); a socket that cannot
// take it within RequestTimeout is closed, as is one whose session ended.
func (s *Session) send(sc *sconn, b []byte) error {
	if err := s.ctx.Err(); err != nil {
		_ = sc.ws.CloseNow()
		return &Error{kind: ErrUnavailable, Err: fmt.Errorf("%w: %w", errSocketClosed, err)}
	}
	sc.wstart.Store(monoNow())
	if !sc.wdogArmed.Load() && sc.wdogArmed.CompareAndSwap(false, true) {
		sc.wdog.Reset(s.c.cfg.RequestTimeout)
	}
	// The context cannot end: the watchdog and the session's end close
	// the socket instead, which ends the write.
	err := sc.ws.Write(context.Background(), websocket.MessageText, b)
	sc.wstart.Store(0)
	if err != nil {
		_ = sc.ws.CloseNow()
		return &Error{kind: ErrUnavailable, Err: fmt.Errorf("%w: %w", errSocketClosed, err)}
	}
	return nil
}

// readMessage reads the next message of sc into its reused buffer: the
// bytes are valid until the next call. It fails once the session ended.
func (s *Session) readMessage(sc *sconn) (websocket.MessageType, []byte, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, nil, err
	}
	// The context cannot end: the session's end closes the socket instead
	// (Session.watch), which ends the read.
	typ, r, err := sc.ws.Reader(context.Background())
	if err == nil {
		b := sc.rbuf[:0]
		if cap(b) == 0 {
			b = make([]byte, 0, 512)
		}
		for err == nil {
			if len(b) == cap(b) {
				b = append(b, 0)[:len(b)]
			}
			var n int
			n, err = r.Read(b[len(b):cap(b)])
			b = b[:len(b)+n]
		}
		if cap(b) <= keptReadBuffer {
			sc.rbuf = b[:0]
		}
		if err == io.EOF {
			return typ, b, nil
		}
	}
	if s.ctx.Err() != nil {
		err = s.ctx.Err() // as the library reports a read its context ended
	}
	return 0, nil, err
}

// appendHeartbeat appends the heartbeat id in its canonical form.
func appendHeartbeat(b []byte, id int64) []byte {
	b = append(b, heartbeatPrefix...)
	b = strconv.AppendInt(b, id, 10)
	return append(b, heartbeatSuffix...)
}

// ackID returns the heartbeat id an ack answers, and whether b is an ack
// in the form the service writes; any other form goes the general way
// (json.Unmarshal into inMsg), which takes it the same.
func ackID(b []byte) (int64, bool) {
	if len(b) <= len(ackPrefix)+len(ackSuffix) || string(b[:len(ackPrefix)]) != ackPrefix ||
		string(b[len(b)-len(ackSuffix):]) != ackSuffix {
		return 0, false
	}
	digits := b[len(ackPrefix) : len(b)-len(ackSuffix)]
	if len(digits) > 18 || digits[0] == '0' {
		return 0, false
	}
	var id int64
	for _, d := range digits {
		if d < '0' || d > '9' {
			return 0, false
		}
		id = id*10 + int64(d-'0')
	}
	return id, true
}

// takeAck handles the ack of heartbeat re on sc; arrived says that
// nothing else marked its arrival (the silent-socket rule).
func (s *Session) takeAck(sc *sconn, re int64, arrived bool) {
	sc.mu.Lock()
	if arrived {
		sc.quietSince = time.Time{}
	}
	var sent time.Time
	ok := false
	n := 0 // the heartbeats up to re: answered, or never to be
	for n < len(sc.beats) && sc.beats[n].id <= re {
		if sc.beats[n].id == re {
			sent, ok = sc.beats[n].sent, true
		}
		n++
	}
	sc.beats = sc.beats[:copy(sc.beats, sc.beats[n:])]
	sc.mu.Unlock()
	if ok {
		s.acked(sc, sent)
	}
}

// acked moves the deadline for a heartbeat sent at sent on sc that the
// service acknowledged. An ack on a retired socket counts for nothing,
// whichever heartbeat it answers (sconn.retiredAt; docs/contract.md §14,
// A2): its instance may have queued a lost before it, which the agent
// ignores on a retired socket, and the ack would then vouch for a lease
// another holder has taken.
func (s *Session) acked(sc *sconn, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !sc.retiredAt.IsZero() {
		return
	}
	moved := false
	for _, h := range s.holdings { // it arrived after their answers (A4)
		if !h.vouched {
			h.vouched, moved = true, true
		}
	}
	if sent.After(s.ackedSent) {
		s.ackedSent = sent
		moved = true
	}
	if moved {
		s.signalLocked()
	}
}

// beat sends a heartbeat on the current socket; when nothing has arrived
// on it for silentLimit since a heartbeat went out, it drops the socket
// instead, and the session resumes on a new one (docs/contract.md §14,
// A3).
func (s *Session) beat() {
	s.mu.Lock()
	sc, window := s.conn, s.window
	retired := sc != nil && !sc.retiredAt.IsZero()
	s.mu.Unlock()
	if sc == nil || retired {
		return
	}
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	now := s.cfg.Clock.Now()
	sc.mu.Lock()
	if sc.quietSince.IsZero() {
		sc.quietSince = now
	} else if quiet := now.Sub(sc.quietSince); quiet >= silentLimit(window) {
		sc.mu.Unlock()
		s.cfg.Logger.Warn("leasesvc session: nothing arrived on the socket while heartbeats went out; replacing it", "silent", quiet)
		_ = sc.ws.CloseNow()
		return
	}
	id := s.ids.Add(1)
	n := 0 // unanswered for long: no answer to them can matter
	for n < len(sc.beats) && sc.beats[n].id < id-16 {
		n++
	}
	sc.beats = append(sc.beats[:copy(sc.beats, sc.beats[n:])], sentBeat{id, now})
	sc.mu.Unlock()
	if s.ctx.Err() != nil {
		return // as write does: the session ended
	}
	_ = s.send(sc, appendHeartbeat(sc.hb[:0], id))
}
