// Package history records what clients of leasesvc asked and were answered,
// and checks the record against the lease contract (docs/contract.md §3): no two
// holdings of a lease overlap in server time, fencing tokens grow with
// acquire time and are never reused, every answer obeys the rules, and no
// acknowledged operation is lost.
//
// Every answer of acquire, renew, release and get carries the lease with
// server times (acquireTime, renewTime, expireTime, serverTime); the checks
// are made on those times alone, never on a client's clock. An operation
// whose answer never came (a timeout, a broken connection, a 5xx) may or
// may not have taken effect, at any moment after it was sent: it is
// recorded as Maybe, and every check treats it so.
//
// Two checks are offered. Check is exact and fast: it rebuilds every
// holding from the answers and tests overlaps, token order, the rules of
// each answer and the final state. Linearizable is a second opinion: it
// runs the porcupine checker with a model of one lease over the same
// history, interval by interval, so it also catches a stale read or a lost
// write that no holding shows.
//
// The succession operations of docs/contract.md §8 are recorded too: a
// transfer, a refusal lease_reserved, and the checkpoint a renew, release
// or transfer wrote. Check also tests that no checkpoint is accepted from a
// stale holding, that every acquire inherits the last acknowledged
// checkpoint, and that nobody but its successor takes a lease a transfer
// reserved.
package history

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// Op is the kind of an operation.
type Op string

// The operations of docs/contract.md §3 that a history holds.
const (
	Acquire Op = "acquire"
	Renew   Op = "renew"
	Release Op = "release"
	Get     Op = "get"
	// Transfer is the transfer of docs/contract.md §8: it ends the holding
	// and reserves the lease for Entry.To.
	Transfer Op = "transfer"
	// Led is not an operation but a session agent's term (docs/contract.md
	// §14): Holder led the holding Token from Call until Return, the end
	// of its validity by the agent's own clock: the send time of its last
	// acked heartbeat + window × (1 − drift margin), or the moment it gave
	// the holding up, whichever came first. Check tests that no later
	// holding of the lease began before Return; Outcome and Lease are
	// unused.
	Led Op = "led"
)

// Outcome is what an operation was answered.
type Outcome int

// Outcomes of an operation.
const (
	// OK is a 200 carrying the lease after the operation.
	OK Outcome = iota
	// Held is a 409 lease_held carrying the current lease.
	Held
	// Lost is a 409 lease_lost (no lease in the answer).
	Lost
	// NotFound is a 404 not_found of a get: the lease never existed.
	NotFound
	// Maybe is no answer: a timeout, a connection broken after the request
	// was sent, or a 5xx. The operation may have taken effect, at any
	// moment after it was sent.
	Maybe
	// Reserved is a 409 lease_reserved of an acquire carrying the free
	// lease, reserved for another holder (docs/contract.md §8).
	Reserved
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Held:
		return "lease_held"
	case Lost:
		return "lease_lost"
	case NotFound:
		return "not_found"
	case Maybe:
		return "maybe"
	case Reserved:
		return "lease_reserved"
	}
	return "outcome?"
}

// Entry is one operation and its answer.
type Entry struct {
	// Client identifies the caller; one client's operations never overlap
	// in time.
	Client int
	// Name is the lease name.
	Name string
	// Op is the operation.
	Op Op
	// Holder is the caller's holder identity (acquire, renew, release).
	Holder string
	// Token is the fencing token sent (renew, release, transfer).
	Token int64
	// TTL is the TTL sent (acquire; renew, where 0 keeps the holding's).
	TTL time.Duration
	// Call is when the request was sent, on the caller's monotonic clock.
	Call time.Time
	// Return is when the answer arrived; ignored for Maybe.
	Return time.Time
	// Outcome is the answer's kind.
	Outcome Outcome
	// Lease is the lease the answer carried (OK, Held); nil otherwise.
	Lease *lease.Lease
	// Note is free text for messages, such as the instance asked.
	Note string
	// Checkpoint is the checkpoint sent (renew, release, transfer); nil
	// when none was.
	Checkpoint json.RawMessage
	// To is the successor named by a transfer.
	To string
	// Priority and Preempt are what an acquire sent as a candidate; they
	// only appear in messages.
	Priority int
	Preempt  bool
	// Session marks an operation sent through a session (docs/contract.md
	// §14). Its holder holds through sessions: the instance renews, takes
	// over and ends such a holding with writes no answer in the history
	// shows, so the checks allow those, and the end of the holder's
	// validity is what its Led entries say.
	Session bool
}

// Recorder collects entries from many goroutines.
type Recorder struct {
	mu      sync.Mutex
	entries []Entry
}

// Add records e.
func (r *Recorder) Add(e Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, e)
}

// Entries returns a copy of what was recorded so far, in recording order.
func (r *Recorder) Entries() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Entry(nil), r.entries...)
}

// Len returns how many entries were recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.entries)
}

// record is the stored state of a lease as an answer shows it: the fields
// that do not depend on the moment of the read. It is comparable.
type record struct {
	holder      string
	token       int64
	ttl         time.Duration
	acquire     time.Time
	renew       time.Time
	expire      time.Time
	transitions int64
	// session: the holder holds through sessions (see Entry.Session); set
	// by partition for the model, never compared.
	session bool
}

// recordOf returns the stored state that l shows. Times are compared with
// Equal semantics by keeping them in UTC with no monotonic reading.
func recordOf(l *lease.Lease) record {
	return record{
		holder: l.Holder, token: l.FencingToken, ttl: l.TTL,
		acquire: l.AcquireTime.UTC().Round(0), renew: l.RenewTime.UTC().Round(0), expire: l.ExpireTime.UTC().Round(0),
		transitions: l.Transitions,
	}
}

// lastWrite is the decision time of the write that produced r: the release
// time for a released holding (its expireTime falls before renewTime +
// ttl), the renew time otherwise.
func (r record) lastWrite() time.Time {
	if r.expire.Before(r.renew.Add(r.ttl)) {
		return r.expire
	}
	return r.renew
}
