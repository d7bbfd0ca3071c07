package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/cmd/leasebench/internal/sockmix"
)

// The clients of issue 45's mixes: bytes that enter where no budget
// charged them. The session-socket ones are sockmix's (HalfFrames,
// PaddedWaits, LeaseTable); the REST ones are here.

// heldLease is the lease the padded waiting acquires wait for, held by
// principal 0 as holder "owner" for the whole run.
const heldLease = "edge.held"

// padHeaders is about n bytes of request headers, "X-Pad-0001: aaa…\r\n",
// each line line bytes (a few more for the last), so that no line is
// longer than a header line may be.
func padHeaders(n, line int) []byte {
	line = max(line, 16)
	var b strings.Builder
	b.Grow(n + line)
	for i := 1; b.Len() < n; i++ {
		name := fmt.Sprintf("X-Pad-%04d: ", i)
		fill := min(line, n-b.Len()) - len(name) - 2
		b.WriteString(name)
		b.WriteString(strings.Repeat("a", max(fill, 1)))
		b.WriteString("\r\n")
	}
	return []byte(b.String())
}

// connTally is what became of a set of raw HTTP connections as they were
// opened and their requests sent.
type connTally struct {
	mu      sync.Mutex
	conns   []net.Conn
	dialed  map[string]int // dial failures by kind; "ok" for the dialed
	notSent map[string]int // requests not sent whole: "stalled", "closed"
	answers map[int]int    // the answers' status codes, when read as they were opened (0: none came)
}

func (t *connTally) note(m *map[string]int, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[key]++
}

// sendFailure names a write error: "stalled" for a deadline, "closed"
// otherwise.
func sendFailure(err error) string {
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return "stalled"
	}
	return "closed"
}

// openBigHeaders sends n GETs of single-lease :watch streams over
// connections with a 4 KiB receive buffer, 8 at a time, request i as
// principal i % principals, each carrying pad as headers, and reads the
// answer's status line (waiting up to 30 s for it, so that the instance
// has taken every request in before the window begins) and nothing
// more: the stream, if the instance opens it, is held open unread.
func openBigHeaders(ctx context.Context, addr string, n, principals int, pad []byte) *connTally {
	t := &connTally{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				t.note(&t.dialed, "failed")
				return
			}
			t.note(&t.dialed, "ok")
			_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
			t.mu.Lock()
			t.conns = append(t.conns, conn)
			t.mu.Unlock()
			p := i % principals
			head := fmt.Sprintf("GET /v1/leases/edge.watch.%d:watch HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n", p, addr, tokenOf(p))
			_ = conn.SetWriteDeadline(time.Now().Add(20 * time.Second))
			bufs := net.Buffers{[]byte(head), pad, []byte("\r\n")}
			if _, err := bufs.WriteTo(conn); err != nil {
				t.note(&t.notSent, sendFailure(err))
			}
			_ = conn.SetWriteDeadline(time.Time{})
			st := statusWithin(conn, 30*time.Second)
			t.mu.Lock()
			if t.answers == nil {
				t.answers = map[int]int{}
			}
			t.answers[st]++
			t.mu.Unlock()
		})
	}
	wg.Wait()
	return t
}

// trickler is a set of connections that send a request's headers slowly.
type trickler struct {
	connTally
	done chan struct{} // closed when every request is sent (or failed)
}

// openTrickle dials n connections, without credentials, that each send
// a GET whose headers are pad, spread evenly over `over` in steps of 100
// ms, then end the headers; it returns once all are dialed. What the
// instance answers is read later (status).
func openTrickle(ctx context.Context, addr string, n int, pad []byte, over time.Duration) *trickler {
	t := &trickler{done: make(chan struct{})}
	steps := max(int(over/(100*time.Millisecond)), 1)
	var wg sync.WaitGroup
	start := time.Now()
	for range n {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			t.note(&t.dialed, "failed")
			continue
		}
		t.note(&t.dialed, "ok")
		t.conns = append(t.conns, conn)
		wg.Go(func() {
			send := func(b []byte) error {
				_ = conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
				_, err := conn.Write(b)
				return err
			}
			err := send([]byte("GET /v1/leases/edge.trickle:watch HTTP/1.1\r\nHost: " + addr + "\r\n"))
			for s := 1; s <= steps && err == nil; s++ {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(start.Add(time.Duration(s) * over / time.Duration(steps)))):
				}
				err = send(pad[len(pad)*(s-1)/steps : len(pad)*s/steps])
			}
			if err == nil {
				err = send([]byte("\r\n"))
			}
			if err != nil {
				t.note(&t.notSent, sendFailure(err))
			}
			_ = conn.SetWriteDeadline(time.Time{})
		})
	}
	go func() { wg.Wait(); close(t.done) }()
	return t
}

// edgeClients are the clients of one issue-45 mix.
type edgeClients struct {
	table, waits *sockmix.SessionSet
	halves       *sockmix.HalfFrames
	big          *connTally
	trickle      *trickler
}

// openEdges opens the issue-45 clients of mx: first the sessions that
// hold a lease table and those whose acquires wait, then the streams
// with large headers, then the trickling connections, and last the
// half frames (which can take every remaining session slot).
func openEdges(ctx context.Context, c config, base, addr string, mx mix) (*edgeClients, error) {
	e := &edgeClients{}
	token := func(i int) string { return tokenOf(i % c.edgePrincipals) }
	window := int(c.sessionWindow / time.Millisecond)
	if mx.leasetable {
		e.table = sockmix.OpenLeaseTable(ctx, addr, c.tableSessions, c.tableLeases, token, 180, window)
	}
	if mx.waits != 0 {
		if _, err := post(base+"/v1/leases/"+heldLease+":acquire", tokenOf(0), `{"holder":"owner","ttlMs":3600000}`, nil); err != nil {
			return e, fmt.Errorf("hold %s: %w", heldLease, err)
		}
		n := c.edgePrincipals
		if mx.waits > 0 {
			n = mx.waits
		}
		e.waits = sockmix.OpenPaddedWaits(ctx, addr, n, c.waitsPer, token, heldLease, c.waitPad, window)
	}
	if mx.bigheaders || mx.trickle {
		pad := padHeaders(c.headerBytes, c.headerLine)
		if mx.bigheaders {
			e.big = openBigHeaders(ctx, addr, c.bigheaders, c.edgePrincipals, pad)
		}
		if mx.trickle {
			e.trickle = openTrickle(ctx, addr, c.trickle, pad, c.trickleOver)
		}
	}
	if mx.halfframe {
		e.halves = sockmix.OpenHalfFrames(ctx, addr, c.halfframes, token, sockmix.HalfFrameConfig{
			Open: c.halfOpen, WindowMs: window, Declared: 1 << 20, Sent: c.frameBytes, Parallel: 16})
	}
	return e, ctx.Err()
}

// conns are the REST connections of the mix whose answers and closes the
// result counts (the large-header streams'), and their answers' status
// codes.
func (e *edgeClients) conns() ([]net.Conn, map[int]int) {
	if e.big == nil {
		return nil, nil
	}
	return e.big.conns, e.big.answers
}

// summary says what the instance did with each kind of client, once the
// window is over; addr is the instance's.
func (e *edgeClients) summary(addr string) string {
	var parts []string
	if e.halves != nil {
		parts = append(parts, "half frames: "+e.halves.String())
	}
	if e.big != nil {
		parts = append(parts, fmt.Sprintf("big headers: dialed %s, not sent whole: %s", countsOf(e.big.dialed), orNone(countsOf(e.big.notSent))))
	}
	if t := e.trickle; t != nil {
		select {
		case <-t.done:
		case <-time.After(5 * time.Second):
		}
		open, err := established(addr, t.conns)
		closed := fmt.Sprint(len(t.conns) - open)
		if err != nil {
			closed = err.Error()
		}
		parts = append(parts, fmt.Sprintf("trickled headers: dialed %s, not sent whole: %s, answers %s, closed %s",
			countsOf(t.dialed), orNone(countsOf(t.notSent)), statuses(statusesOf(t.conns)), closed))
	}
	if e.waits != nil {
		parts = append(parts, "padded waits: "+e.waits.String())
	}
	if e.table != nil {
		parts = append(parts, "lease table: "+e.table.String())
	}
	return strings.Join(parts, "; ")
}

// close closes every client from this end.
func (e *edgeClients) close() {
	if e.halves != nil {
		e.halves.Close()
	}
	if e.waits != nil {
		e.waits.Close()
	}
	if e.table != nil {
		e.table.Close()
	}
	for _, t := range []*connTally{e.big, e.trickleTally()} {
		if t != nil {
			for _, conn := range t.conns {
				_ = conn.Close()
			}
		}
	}
}

func (e *edgeClients) trickleTally() *connTally {
	if e.trickle == nil {
		return nil
	}
	return &e.trickle.connTally
}

// statusesOf reads the status code of the answer on each connection
// (status), 64 at a time.
func statusesOf(conns []net.Conn) map[int]int {
	out := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, conn := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			st := status(conn)
			mu.Lock()
			out[st]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}
