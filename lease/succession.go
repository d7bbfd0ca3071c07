package lease

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"time"
)

// Bounds of succession (docs/contract.md §8).
const (
	// MaxPriority is the highest priority an acquire may ask for.
	MaxPriority = 1000
	// ReserveWindow is the longest a lease stays reserved for its best
	// registered candidate after a holding ends.
	ReserveWindow = 5 * time.Second
	// DefaultTransferReserve is how long a transfer reserves the lease for
	// its successor when the request does not say.
	DefaultTransferReserve = 5 * time.Second
	// MaxTransferReserve is the longest a transfer may reserve the lease.
	MaxTransferReserve = time.Minute
	// DefaultMaxCandidates is how many candidates one lease registers, at
	// most, unless Config.MaxCandidates says otherwise.
	DefaultMaxCandidates = 64
)

// better reports whether candidate a ranks before b: higher priority, then
// earlier start of waiting, then holder in byte order.
func better(a, b Candidate) bool { return rank(a, b) < 0 }

func rank(a, b Candidate) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	if c := a.Since.Compare(b.Since); c != 0 {
		return c
	}
	return cmp.Compare(a.Holder, b.Holder)
}

// PlaceGrace is how long a candidate's place in line outlives its
// registration: a holder whose wait ran out and that asks again within it
// keeps its start of waiting (an Elector waits in turns of at most
// MaxWait). The registration itself ends at its deadline: it ranks for
// nothing in the meantime.
const PlaceGrace = 2 * time.Second

// live returns the candidates of r whose wait has not run out at now.
func live(r *Record, now time.Time) []Candidate { return since(r, now, 0) }

// kept returns the candidates of r that a write keeps: the live ones and
// those whose place is still held (PlaceGrace).
func kept(r *Record, now time.Time) []Candidate { return since(r, now, PlaceGrace) }

// since returns the candidates of r whose registration ended less than
// grace before now (or has not ended).
func since(r *Record, now time.Time, grace time.Duration) []Candidate {
	if r == nil {
		return nil
	}
	out := make([]Candidate, 0, len(r.Candidates))
	for _, c := range r.Candidates {
		if now.Before(c.Until.Add(grace)) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// best returns the best of cs for which ok holds, or nil.
func best(cs []Candidate, ok func(Candidate) bool) *Candidate {
	var b *Candidate
	for i := range cs {
		if ok(cs[i]) && (b == nil || better(cs[i], *b)) {
			b = &cs[i]
		}
	}
	return b
}

// Reservation returns whom the free lease is reserved for at ServerTime
// and until when (docs/contract.md §8), or "" when it is open to anyone: a
// held lease is never reserved; a transfer reserves it for its successor
// for the transfer's window; otherwise, for ReserveWindow after a holding
// ends, it is reserved for the best live registered candidate, no longer
// than that candidate's registration.
func (l Lease) Reservation() (holder string, until time.Time) {
	who, _, until := reservation(&l.Record, l.ServerTime)
	return who, until
}

// reservation is Reservation with the principal it is for: the one the
// transfer named (by default its own) or the candidate's, so that only an
// acquire as that holder by that principal takes the lease.
func reservation(r *Record, now time.Time) (holder, principal string, until time.Time) {
	if r == nil || now.Before(r.ExpireTime) {
		return "", "", time.Time{}
	}
	if r.ReservedFor != "" && now.Before(r.ReservedUntil) {
		return r.ReservedFor, r.ReservedPrincipal, r.ReservedUntil
	}
	end := r.ExpireTime.Add(ReserveWindow)
	if !now.Before(end) {
		return "", "", time.Time{}
	}
	b := best(live(r, now), func(Candidate) bool { return true })
	if b == nil {
		return "", "", time.Time{}
	}
	if b.Until.Before(end) {
		end = b.Until
	}
	return b.Holder, b.Principal, end
}

// YieldTo names the candidate the live holding is asked to step down for
// (docs/contract.md §8): the best live candidate that asked to preempt with
// a priority strictly higher than the holding's; "" when none did or the
// lease is not held.
func (l Lease) YieldTo() string {
	if !l.Held() {
		return ""
	}
	b := best(live(&l.Record, l.ServerTime), func(c Candidate) bool {
		return c.Preempt && c.Priority > l.Priority && c.Holder != l.Holder
	})
	if b == nil {
		return ""
	}
	return b.Holder
}

// CandidateCount returns how many registered candidates wait for the lease at
// ServerTime.
func (l Lease) CandidateCount() int { return len(live(&l.Record, l.ServerTime)) }

// BestCandidatePriority returns the priority of the best registered
// candidate waiting for the lease at ServerTime (docs/contract.md §8: the
// one a reservation would name), and false when none waits.
func (l Lease) BestCandidatePriority() (int, bool) {
	b := best(live(&l.Record, l.ServerTime), func(Candidate) bool { return true })
	if b == nil {
		return 0, false
	}
	return b.Priority, true
}

// registration is the candidate a waiting acquire registers.
type registration struct {
	id       string
	priority int
	preempt  bool
	deadline time.Time // local clock: when the wait runs out
}

func newRegistration(req AcquireRequest) *registration {
	if !req.Candidate || req.Wait <= 0 {
		return nil
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &registration{id: hex.EncodeToString(b[:]), priority: req.Priority, preempt: req.Preempt,
		deadline: time.Now().Add(req.Wait)}
}

// register returns the candidates of cur kept at now, with reg's
// registration for holder in them (lasting waitLeft, what remains of its
// wait), and whether that differs from what is
// stored (a write is needed). A holder has one registration per principal:
// a newer request of the same principal replaces an older one's and keeps
// its place in line, also when the older one's wait ran out less than
// PlaceGrace ago; another principal's request under the same holder name
// registers beside it and changes nothing of it. When the
// lease already has max candidates, a newcomer that ranks after all of
// them is not registered (it still waits, unranked); one that ranks before
// the last takes its place.
func register(cur *Record, now time.Time, holder, principal string, reg *registration, waitLeft time.Duration, max int) ([]Candidate, bool) {
	cs := kept(cur, now)
	changed := cur == nil || len(cs) != len(cur.Candidates)
	me := Candidate{ID: reg.id, Holder: holder, Principal: principal, Priority: reg.priority, Preempt: reg.preempt,
		Since: now, Until: now.Add(max0(waitLeft)).Truncate(time.Microsecond)}
	i := slices.IndexFunc(cs, func(c Candidate) bool { return c.Holder == holder && c.Principal == principal })
	if i >= 0 {
		old := cs[i]
		if old.ID == me.ID {
			return cs, changed
		}
		me.Since = old.Since
		cs[i] = me
		return cs, true
	}
	if len(cs) >= max {
		slices.SortFunc(cs, rank)
		if !better(me, cs[len(cs)-1]) {
			return cs, changed
		}
		cs = cs[:len(cs)-1]
	}
	return append(cs, me), true
}

// unregister returns the candidates of cur kept at now without the one of
// id, and whether anything changed.
func unregister(cur *Record, now time.Time, id string) ([]Candidate, bool) {
	cs := kept(cur, now)
	changed := cur != nil && len(cs) != len(cur.Candidates)
	if i := slices.IndexFunc(cs, func(c Candidate) bool { return c.ID == id }); i >= 0 {
		cs = slices.Delete(cs, i, i+1)
		changed = true
	}
	return nilIfEmpty(cs), changed
}

// withoutHolder returns the candidates of cur kept at now, except those of
// holder registered by principal: another principal's registration under
// the same name stays.
func withoutHolder(cur *Record, now time.Time, holder, principal string) []Candidate {
	cs := slices.DeleteFunc(kept(cur, now), func(c Candidate) bool { return c.Holder == holder && c.Principal == principal })
	return slices.Clip(nilIfEmpty(cs))
}

func max0(d time.Duration) time.Duration { return max(d, 0) }

func nilIfEmpty(cs []Candidate) []Candidate {
	if len(cs) == 0 {
		return nil
	}
	return cs
}
