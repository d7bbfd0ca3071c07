package httpapi

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/session"
)

// The fixed costs a session socket is charged in the memory budget
// (docs/contract.md §14 Limits, §16), besides the bytes it queues: what an
// upgraded socket holds before it carries a session (its connection's
// buffers, the WebSocket reader and writer, its goroutines' stacks), and
// what it holds once it does. Measured with cmd/leasebench/sessionscale
// (docs/performance.md, "Where a heartbeat's CPU goes"): 47–50 KiB per
// open session at window 1 s since a socket runs on a goroutine of its own
// with no writer or renewal goroutine waiting (it was 111–128 KiB, and an
// unopened socket grew an instance by ≈ 117 KiB beside issue 45's mixes,
// sockets replaced before their memory came back). The charges keep a
// margin over what is measured, so that the budget counts at least what
// the instance grows by; an open adds the rest of a session's cost.
const (
	socketCost  = 56 << 10
	sessionCost = 64 << 10
)

// admit takes the socket's session slot and charges its fixed cost to the
// memory budget, before the upgrade; a refusal (nil is none) takes
// nothing.
func (c *sessionConn) admit(r *http.Request) *problem {
	slot, err := c.a.cfg.Sessions.Admit(c.caller)
	var limit *session.LimitError
	switch {
	case errors.As(err, &limit):
		return &problem{status: http.StatusTooManyRequests, code: codeResourceExhausted, retryAfter: 1, limit: "sessions",
			detail: "too many " + limit.What + " (at most " + strconv.Itoa(limit.Max) + ", sockets not yet in a session included); retry later"}
	case errors.Is(err, session.ErrShuttingDown):
		p := shuttingDown()
		return &p
	case err != nil:
		return &problem{status: http.StatusInternalServerError, code: codeInternal, detail: "the session slot could not be taken"}
	}
	c.slot = slot
	c.acct = c.a.cfg.Limits.Memory.Account(c.caller)
	// The upgrade request (its headers) lives as long as the socket.
	if p := c.charge(socketCost+heldRequestCost(r)-connBufferCost, "session socket"); p != nil {
		c.release()
		return p
	}
	return nil
}

// charge grows the socket's account by n bytes for what; nil when the
// budget met it, else the refusal: 429 when the caller's share (smaller
// than the total) is what refused it, 503 when the instance's total is.
func (c *sessionConn) charge(n int64, what string) *problem {
	if c.acct.Grow(n) {
		return nil
	}
	p := c.refusal(n, what)
	return &p
}

// refusal is the answer to a charge of n bytes for what that the budget
// could not meet.
func (c *sessionConn) refusal(n int64, what string) problem {
	b := c.a.cfg.Limits.Memory
	if b.Share() < b.Total() && b.Used(c.caller)+n > b.Share() {
		return problem{status: http.StatusTooManyRequests, code: codeResourceExhausted, retryAfter: 1,
			detail: fmt.Sprintf("this caller's share of the instance's memory budget (%d bytes, LEASESVC_MEMORY_PER_CALLER) cannot take another %s; retry later", b.Share(), what)}
	}
	return problem{status: http.StatusServiceUnavailable, code: codeUnavailable, retryAfter: 1,
		detail: fmt.Sprintf("the instance's memory budget (%d bytes, LEASESVC_MEMORY_BUDGET) cannot take another %s; retry later, or elsewhere", b.Total(), what)}
}

// release gives back the socket's slot (unless it passed to a session)
// and everything its account holds.
func (c *sessionConn) release() {
	if c.slot != nil {
		c.slot.Release()
	}
	c.acct.Close()
}

// openTimedOut closes a socket that sent nothing within the open timeout
// (LEASESVC_HEADER_TIMEOUT): error 408 request_timeout, then 1008.
func (c *sessionConn) openTimedOut() {
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if started {
		return
	}
	c.fatal(websocket.StatusPolicyViolation, problem{status: http.StatusRequestTimeout, code: codeRequestTimeout,
		detail: fmt.Sprintf("no open or resume within %v of the upgrade (LEASESVC_HEADER_TIMEOUT)", c.cfg.OpenTimeout)})
}

// rateLimited takes a token of the caller's rate limit (Config.Limiter,
// the bucket its REST calls take from) for a lease operation; nil when
// there was one, else the answer: 429 with the wait. A write leaves half
// the bucket to the caller's requests: its sockets' upgrades above all,
// so that its writes never leave a session unable to resume.
func (c *sessionConn) rateLimited() *problem {
	lim := c.a.cfg.Limiter
	ok, retry := lim.AllowKeeping(c.rateKey, lim.Burst()/2)
	if ok {
		return nil
	}
	secs := max(int(math.Ceil(retry.Seconds())), 1)
	return &problem{status: http.StatusTooManyRequests, code: codeResourceExhausted, retryAfter: secs,
		detail: "rate limit exceeded for this caller (LEASESVC_RATE_LIMIT, shared with its REST calls); retry in " + strconv.Itoa(secs) + "s"}
}

// auditClose writes the audit line of a socket the service closes with
// code: s is its session (nil: none yet), outcome the problem code, detail
// why.
func (c *sessionConn) auditClose(s *session.Session, outcome string, code websocket.StatusCode, detail string) {
	short := ""
	if s != nil {
		short = s.ShortKey()
	}
	c.a.cfg.Audit.Session(c.ctx, "session_socket_close", outcome, c.principal, short,
		strconv.Itoa(int(code))+": "+detail)
}
