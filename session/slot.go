package session

import (
	"context"
	"errors"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// Slot is the session slot a socket takes at its upgrade, before it sends
// open or resume (docs/contract.md §14 Limits): an upgraded socket counts
// against MaxPerCaller and MaxSessions at once, and the slot passes to the
// session the socket opens or resumes.
//
// A caller at its limit that has sessions registered here still gets a
// spare slot, at most one per such session: a spare slot can only resume a
// session of the caller registered here (the session is moving to a new
// socket, which needs no second slot). Spare slots are bounded by the
// sessions registered, so the sockets of one caller are at most twice
// MaxPerCaller; they count against MaxSessions like any other socket, so
// that the instance's sockets never pass it; and a spare socket that sends
// nothing is closed at the open timeout like any other.
//
// Release gives the slot back unless it passed to a session; it is safe to
// call more than once.
type Slot struct {
	r      *Registry
	caller string
	state  slotState // guarded by r.mu
}

type slotState int

const (
	slotReleased slotState = iota
	slotHeld               // counted in perCaller
	slotSpare              // counted in spare: resume of a registered session only
	slotPassed             // the count belongs to a session now
)

// errSlotUsed is an open or resume on a slot already passed or released.
var errSlotUsed = errors.New("session: the socket's slot is already used")

// Admit takes a slot for a new socket of caller, or returns a *LimitError
// (or ErrShuttingDown) and takes nothing.
func (r *Registry) Admit(caller string) (*Slot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sl := &Slot{r: r, caller: caller}
	switch {
	case r.closing:
		return nil, ErrShuttingDown
	case r.slots()+r.spares() >= r.cfg.MaxSessions:
		// Spare sockets count against the instance's cap too: it bounds
		// sockets, which is what Cloud Run counts (docs/contract.md §14
		// Limits); a session moving off a full instance resumes elsewhere.
		return nil, &LimitError{What: "sessions of this instance", Max: r.cfg.MaxSessions}
	case r.perCaller[caller] < r.cfg.MaxPerCaller:
		r.perCaller[caller]++
		sl.state = slotHeld
	case r.spare[caller] < r.sessionsOf(caller):
		r.spare[caller]++
		sl.state = slotSpare
	default:
		return nil, r.limitLocked(caller)
	}
	return sl, nil
}

// limitLocked is the limit caller is at; r.mu held.
func (r *Registry) limitLocked(caller string) error {
	if r.perCaller[caller] >= r.cfg.MaxPerCaller {
		return &LimitError{What: "sessions of this caller", Max: r.cfg.MaxPerCaller}
	}
	return &LimitError{What: "sessions of this instance", Max: r.cfg.MaxSessions}
}

// spares counts the spare slots taken; r.mu held.
func (r *Registry) spares() int {
	n := 0
	for _, c := range r.spare {
		n += c
	}
	return n
}

// sessionsOf counts caller's sessions registered here; r.mu held.
func (r *Registry) sessionsOf(caller string) int {
	n := 0
	for _, s := range r.byKey {
		if s.caller == caller {
			n++
		}
	}
	return n
}

// pass hands sl's count to the session that replacing's resume (or an
// open, replacing "") registers; r.mu held.
func (sl *Slot) pass(moving bool) error {
	r := sl.r
	switch {
	case sl.state == slotHeld:
	case sl.state == slotSpare && moving:
		r.dropSpare(sl.caller)
		r.perCaller[sl.caller]++
	case sl.state == slotSpare:
		return r.limitLocked(sl.caller)
	default:
		return errSlotUsed
	}
	sl.state = slotPassed
	return nil
}

// dropSpare uncounts one of caller's spare slots; r.mu held.
func (r *Registry) dropSpare(caller string) {
	if r.spare[caller]--; r.spare[caller] <= 0 {
		delete(r.spare, caller)
	}
}

// Release gives the slot back, unless it passed to a session.
func (sl *Slot) Release() {
	r := sl.r
	r.mu.Lock()
	defer r.mu.Unlock()
	switch sl.state {
	case slotHeld:
		r.giveBack(sl.caller)
	case slotSpare:
		r.dropSpare(sl.caller)
	}
	sl.state = slotReleased
}

// Open opens a session on the slot, as Registry.Open does with the slot's
// caller; the slot passes to the session. A spare slot cannot open.
func (sl *Slot) Open(ctx context.Context, principal string, window time.Duration, c Conn) (*Session, string, error) {
	return sl.r.open(ctx, sl, sl.caller, principal, window, c)
}

// Resume resumes a session on the slot, as Registry.Resume does with the
// slot's caller; the slot passes to the session. A spare slot resumes only
// a session of the caller registered here.
func (sl *Slot) Resume(ctx context.Context, principal, id string, epoch int64, window time.Duration, claims []Claim, c Conn, answer ResumeAnswer) (*Session, []lease.Lease, []Lost, error) {
	return sl.r.resume(ctx, sl, sl.caller, principal, id, epoch, window, claims, c, answer)
}

// Slots returns the slots taken now: held by sockets or sessions, and
// spare.
func (r *Registry) Slots() (taken, spare int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.spare {
		spare += n
	}
	return r.slots(), spare
}
