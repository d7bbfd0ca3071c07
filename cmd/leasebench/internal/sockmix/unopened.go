// Package sockmix holds the session-socket mixes that the measuring
// tools of cmd/leasebench (sessionsockets, slowreaders) run against a
// leasesvc instance. Issue 37's: upgraded sockets that never send open or
// resume (Unopened), and sockets that open a session, then ask for
// answers that carry a 33 KB lease and read none of them (NonReading).
// Issue 45's, written frame by frame over the TCP connection (frame.go,
// RawSocket): sockets that send the start of a large frame and stall
// (HalfFrames), sessions whose waiting acquires carry padded messages
// (OpenPaddedWaits), and sessions holding a table of the longest leases
// (OpenLeaseTable). Each mix is opened, left to run while the caller
// samples the instance's memory, and then asked what the instance did
// with it.
package sockmix

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Subprotocol is the sessions' WebSocket subprotocol.
const Subprotocol = "leasesvc.session.v2"

// Upgrade sends a session upgrade request with token over a new
// connection and returns the connection when it was upgraded (101), and
// the status either way.
func Upgrade(ctx context.Context, addr, token string) (net.Conn, int, error) {
	conn, _, st, err := upgrade(ctx, addr, token)
	return conn, st, err
}

// Unopened is a set of upgraded session sockets that send nothing, each
// watched for the instance closing it.
type Unopened struct {
	headerTimeout time.Duration

	mu       sync.Mutex
	statuses map[int]int // upgrade answers by status; -1: no answer
	conns    []net.Conn
	lastUp   time.Time
	told     atomic.Int64 // sent something (the error, the close frame) within the header timeout + 1 s
	ended    atomic.Int64 // closed by the instance within the header timeout + 6 s
	gone     atomic.Int64 // closed by the instance at all
}

// OpenUnopened upgrades n sockets at addr, 64 at a time, socket i as
// the principal whose token is token(i), and returns once every upgrade
// has been answered. None sends anything; headerTimeout is the
// instance's LEASESVC_HEADER_TIMEOUT, which the watch times against.
func OpenUnopened(ctx context.Context, addr string, n int, token func(i int) string, headerTimeout time.Duration) *Unopened {
	u := &Unopened{headerTimeout: headerTimeout, statuses: map[int]int{}}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			conn, status, err := Upgrade(ctx, addr, token(i))
			u.mu.Lock()
			defer u.mu.Unlock()
			if err != nil {
				u.statuses[-1]++
				return
			}
			u.statuses[status]++
			if conn == nil {
				return
			}
			up := time.Now()
			u.conns, u.lastUp = append(u.conns, conn), up
			go u.watch(conn, up)
		})
	}
	wg.Wait()
	return u
}

// watch reads conn until the instance closes it.
func (u *Unopened) watch(conn net.Conn, up time.Time) {
	buf := make([]byte, 4096)
	if _, err := conn.Read(buf); err == nil && time.Since(up) <= u.headerTimeout+time.Second {
		u.told.Add(1) // the error message and the close frame
	}
	for {
		if _, err := conn.Read(buf); err != nil {
			break
		}
	}
	u.gone.Add(1)
	if time.Since(up) <= u.headerTimeout+6*time.Second {
		u.ended.Add(1)
	}
}

// WaitClosed waits until the instance has closed every upgraded socket,
// or until the header timeout and 6 s have passed since the last
// upgrade, or ctx ends.
func (u *Unopened) WaitClosed(ctx context.Context) {
	u.mu.Lock()
	deadline, upgraded := u.lastUp.Add(u.headerTimeout+6*time.Second), int64(len(u.conns))
	u.mu.Unlock()
	for time.Now().Before(deadline) && u.gone.Load() < upgraded && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
}

// UnopenedResult is what the instance did with the sockets.
type UnopenedResult struct {
	// Upgraded is how many were upgraded (101).
	Upgraded int
	// Statuses counts the upgrade answers by status (-1: no answer).
	Statuses map[int]int
	// Told is how many were sent something (the error, the close frame)
	// within the header timeout + 1 s, Ended how many the instance closed
	// within the header timeout + 6 s, Gone how many it closed so far.
	Told, Ended, Gone int
}

// Result is what the instance did with the sockets so far.
func (u *Unopened) Result() UnopenedResult {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := make(map[int]int, len(u.statuses))
	for k, v := range u.statuses {
		st[k] = v
	}
	return UnopenedResult{Upgraded: len(u.conns), Statuses: st, Told: int(u.told.Load()), Ended: int(u.ended.Load()), Gone: int(u.gone.Load())}
}

// Refused renders the upgrades not answered 101 as "5100×429", by
// status, joined by sep.
func (r UnopenedResult) Refused(sep string) string {
	var codes []int
	for st := range r.Statuses {
		if st != http.StatusSwitchingProtocols {
			codes = append(codes, st)
		}
	}
	sort.Ints(codes)
	var parts []string
	for _, st := range codes {
		parts = append(parts, fmt.Sprintf("%d×%d", r.Statuses[st], st))
	}
	return strings.Join(parts, sep)
}

// Close closes the sockets from this end.
func (u *Unopened) Close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, c := range u.conns {
		_ = c.Close()
	}
}
