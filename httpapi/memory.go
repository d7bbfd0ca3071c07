package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"unsafe"

	"github.com/leasesvc/leasesvc/internal/membudget"
	"github.com/leasesvc/leasesvc/lease"
)

// The REST side of the memory budget (docs/contract.md §16): a stream's
// subscription to the events hub, what it queues and the snapshot chunk
// it holds, a list page's chunk in flight
// and a request body are charged to Limits.Memory, by caller (callerKey),
// for as long as the instance holds them. A charge the budget cannot meet
// changes nothing: a request is answered 429 (the caller's share is spent)
// or 503 (the instance's budget is), a list page ends early with its
// nextPageToken, a stream ends with an `overflow` event saying which.

// prefixStreamEvents is the buffer of a prefix stream's subscription to
// the events hub, in events: each place costs a lease.Event (≈ 0.9 KiB)
// whether used or not, so the hub's 1,024 were ≈ 0.9 MiB per stream, the
// "≈ 1 MiB chunk" issue 37 measured in every stuck prefix stream. The
// stream's loop drains it promptly once live; a burst larger than it
// (or one during a long snapshot) makes the stream list the prefix again
// (Lagged), as before with a larger burst.
const prefixStreamEvents = 64

// subscriptionCost is what a hub subscription with a buffer of n events
// holds from the start.
func subscriptionCost(n int) int64 { return int64(n) * int64(unsafe.Sizeof(lease.Event{})) }

// heldRequestCost is what a request held open (a stream, a session
// socket) keeps for its whole life beyond what its handler charges: its
// headers as parsed (up to LEASESVC_MAX_HEADER_BYTES, each value a string
// and a slice entry), its URL, and its connection's buffers and goroutine
// (connBufferCost).
func heldRequestCost(r *http.Request) int64 {
	n := int64(len(r.RequestURI)) + connBufferCost
	for k, vs := range r.Header {
		n += int64(len(k)) + 48
		for _, v := range vs {
			n += int64(len(v)) + 32
		}
	}
	return n
}

// connBufferCost is a served connection's bufio reader and writer (4 KiB
// each) and its goroutine's stack.
const connBufferCost = 16 << 10

// memoryError is a charge of need bytes the budget refused, for the
// reason refusal.
type memoryError struct {
	need    int64
	refusal membudget.Refusal
}

func (e *memoryError) Error() string {
	return "the memory budget cannot hold " + strconv.FormatInt(e.need, 10) + " more bytes"
}

// account opens the budget account of one client object of r's caller.
func (a *api) account(r *http.Request) *membudget.Account {
	return a.cfg.Limits.Memory.Account(a.callerKey(r))
}

// memoryProblem is the answer to a request whose charge the budget refused
// for the reason rf: 429 when the caller's share is spent, so that it
// closes or reads what it holds open; 503 when the instance's budget is, so
// that the client retries, on another instance if there is one.
func (a *api) memoryProblem(rf membudget.Refusal) problem {
	b := a.cfg.Limits.Memory
	if rf == membudget.ByShare {
		return problem{status: http.StatusTooManyRequests, code: codeResourceExhausted, retryAfter: 5,
			detail: fmt.Sprintf("this caller's share of the instance's memory (%d bytes, LEASESVC_MEMORY_PER_CALLER) is held by what it has open; read or close its streams and pages, then retry", b.Share())}
	}
	return problem{status: http.StatusServiceUnavailable, code: codeUnavailable, retryAfter: 1,
		detail: fmt.Sprintf("this instance's memory budget (%d bytes, LEASESVC_MEMORY_BUDGET) is spent; retry (another instance may answer)", b.Total())}
}

// memoryReason is the reason of the overflow event of a stream whose
// charge the budget refused for the reason rf.
func (a *api) memoryReason(rf membudget.Refusal) string {
	b := a.cfg.Limits.Memory
	if rf == membudget.ByShare {
		return fmt.Sprintf("this caller's share of the instance's memory (%d bytes) is held by its streams and pages; reconnect with Last-Event-ID to resume once it reads or closes some", b.Share())
	}
	return fmt.Sprintf("this instance's memory budget (%d bytes) is spent; reconnect with Last-Event-ID to resume (another instance may answer)", b.Total())
}

// chargeBody charges the body of r, as the handler will read it (at most
// MaxBodyBytes; all of them when its length is not known), until the
// returned release; a body the budget cannot hold is answered 429 or 503
// before a byte of it is read, and ok is false.
func (a *api) chargeBody(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return func() {}, true
	}
	n := int64(MaxBodyBytes)
	if r.ContentLength > 0 && r.ContentLength < n {
		n = r.ContentLength
	}
	acct := a.account(r)
	if !acct.Grow(n) {
		w.Header().Set("Connection", "close") // the body is not read
		a.fail(w, r, a.memoryProblem(acct.Refusal()))
		return nil, false
	}
	return acct.Close, true
}

// remember records m as the newest event sent of lease name. A lease the
// stream had not sent before costs its mark in the memory budget, for the
// stream's life (docs/contract.md §16: a stream over 10,000 leases holds
// ≈ 10 MiB of them); a mark the budget refuses ends the stream with an
// overflow event, and false says so.
func (p *prefixStream) remember(name string, m lease.Event) bool {
	if _, ok := p.last[name]; !ok {
		cost := markCost(name)
		if !p.s.acct.Grow(cost) {
			p.s.failMemory(cost)
			return false
		}
	}
	p.last[name] = m
	return true
}

// markCost is what remembering a lease's newest event costs a prefix
// stream: the event, the name and the map's own share.
func markCost(name string) int64 { return int64(unsafe.Sizeof(lease.Event{})) + int64(len(name)) + 64 }
