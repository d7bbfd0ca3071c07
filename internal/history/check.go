package history

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// Result is what Check found.
type Result struct {
	// Leases is the number of lease names in the history.
	Leases int
	// Ops counts the operations by outcome.
	Ops map[Outcome]int
	// Holdings is the number of distinct holdings (lease, token) observed.
	Holdings int
	// Violations lists every broken rule, at most MaxViolations of them;
	// Count is how many there were in all.
	Violations []Violation
	// Count is the number of violations found.
	Count int
}

// MaxViolations bounds the messages a Result keeps.
const MaxViolations = 100

// Violation is one broken rule.
type Violation struct {
	// Lease is the lease's name.
	Lease string
	// At is the server time around which it happened, for Dump.
	At time.Time
	// Msg says what is wrong, with the answers that show it.
	Msg string
}

// String implements fmt.Stringer.
func (v Violation) String() string { return v.Lease + ": " + v.Msg }

func (r *Result) add(name string, at time.Time, format string, args ...any) {
	r.Count++
	if len(r.Violations) < MaxViolations {
		r.Violations = append(r.Violations, Violation{Lease: name, At: at, Msg: fmt.Sprintf(format, args...)})
	}
}

// Check tests a history against the lease contract. It assumes that the
// leases of the history were created by it (the names are used by no one
// else, so tokens start at 1), and that each holder name belongs to one
// client. finals maps every lease name to the lease read after every
// operation had ended (nil when the read answered not_found); a name
// missing from finals skips the final-state checks for that lease.
//
// The checks, per lease:
//   - every answer obeys the rules of its operation (an acquire answers a
//     live holding of the caller whose expireTime is serverTime + ttl, a
//     refusal shows a live holding of another, and so on) and transitions
//     equals the fencing token;
//   - one token, one holding: every answer that shows a token shows the same
//     holder and acquireTime;
//   - tokens increase with acquireTime (two holdings begin at the same
//     instant only when the first was released at that very instant);
//   - no overlap: a holding seen live at server time s ends at or after s
//     (a release at s itself ends it at s), so the next holding must not
//     begin before s; and the next holding begins at or
//     after the end of this one as its holder's last acknowledged write set
//     it (unless an unacknowledged release could have cut it short);
//   - no phantom holding: a token missing from the answers, or shown without
//     its holder ever being told it acquired it, needs an unacknowledged
//     acquire that could have made it;
//   - nothing acknowledged is lost: the final token is at least the highest
//     acknowledged one, and when the last holding's holder left nothing
//     unacknowledged, the final state is exactly its last acknowledged write.
func Check(entries []Entry, finals map[string]*lease.Lease) Result {
	res := Result{Ops: map[Outcome]int{}}
	byName := map[string][]Entry{}
	terms := map[string][]Entry{}
	for _, e := range entries {
		if e.Op == Led {
			terms[e.Name] = append(terms[e.Name], e)
			continue
		}
		res.Ops[e.Outcome]++
		byName[e.Name] = append(byName[e.Name], e)
	}
	names := sortedNames(byName)
	res.Leases = len(names)
	for _, name := range names {
		final, hasFinal := finals[name]
		res.Holdings += checkLease(&res, name, byName[name], final, hasFinal, terms[name])
	}
	return res
}

// holding is what the answers show of one holding of a lease.
type holding struct {
	token       int64
	holder      string
	acquire     time.Time
	transitions int64
	live        time.Time // the latest server time at which a write showed it live
	liveWhere   string    // the answer that showed it live then
	seenLive    bool
	// The same from reads (gets and refusals). A read is held to the same
	// rule as a write: docs/contract.md §1 defines held as serverTime < expireTime when
	// the answer was computed, so no answer may show a holding live at a
	// server time after its successor began, even one concurrent with that
	// successor's acquire in real time (linearizable, but not the
	// contract). Every backend decides at or after the commit of what it
	// read, which makes this hold (docs/performance.md, Spanner).
	readLive      time.Time
	readLiveWhere string
	readSeenLive  bool
	where         string // the first answer that showed it, for messages
}

// checkLease runs the checks of Check on the entries of one lease, and on
// the terms (Led) of its session holders, and returns the number of
// holdings seen.
func checkLease(res *Result, name string, es []Entry, final *lease.Lease, hasFinal bool, terms []Entry) int {
	slices.SortStableFunc(es, func(a, b Entry) int { return a.Call.Compare(b.Call) })
	sess := sessionHolders(es)
	hs := map[int64]*holding{}
	observe := func(l *lease.Lease, where string, e *Entry) {
		r := recordOf(l)
		h, ok := hs[r.token]
		if !ok {
			h = &holding{token: r.token, holder: r.holder, acquire: r.acquire, transitions: r.transitions, where: where}
			hs[r.token] = h
		} else if h.holder != r.holder || !h.acquire.Equal(r.acquire) || h.transitions != r.transitions {
			res.add(name, l.ServerTime, "token %d reused: %s shows holder %q acquired %s (transitions %d), %s shows holder %q acquired %s (transitions %d)",
				r.token, h.where, h.holder, fmtTime(h.acquire), h.transitions, where, r.holder, fmtTime(r.acquire), r.transitions)
		}
		isRead := e != nil && (e.Op == Get || e.Outcome == Held || e.Outcome == Reserved)
		if s := l.ServerTime; s.Before(l.ExpireTime) {
			switch {
			case isRead && (!h.readSeenLive || s.After(h.readLive)):
				h.readLive, h.readLiveWhere, h.readSeenLive = s, where, true
			case !isRead && (!h.seenLive || s.After(h.live)):
				h.live, h.liveWhere, h.seenLive = s, where, true
			}
		}
	}
	maybeAcquires := map[string]int{} // by holder
	totalMaybeAcquires := 0
	ackAcquired := map[int64]bool{} // tokens whose holder was told it acquired them
	var maxAck int64
	for _, e := range es {
		if e.Outcome == Maybe && e.Op == Acquire {
			maybeAcquires[e.Holder]++
			totalMaybeAcquires++
		}
		if e.Lease == nil {
			if e.Outcome == OK || e.Outcome == Held || e.Outcome == Reserved {
				res.add(name, e.Call, "%s answered %s without a lease", describe(e), e.Outcome)
			}
			continue
		}
		checkAnswer(res, e)
		observe(e.Lease, describe(e), &e)
		if e.Outcome == OK && e.Op != Get {
			maxAck = max(maxAck, e.Lease.FencingToken)
			if e.Op == Acquire {
				ackAcquired[e.Lease.FencingToken] = true
			}
		}
	}
	if hasFinal && final != nil {
		checkAnswer(res, Entry{Name: name, Op: Get, Outcome: OK, Lease: final})
		observe(final, "the final read", nil) // after every operation ended: as strict as a write
	}

	tokens := make([]int64, 0, len(hs))
	for t := range hs {
		tokens = append(tokens, t)
	}
	slices.Sort(tokens)
	// Holdings nobody acknowledged, and tokens nobody saw, need an
	// unacknowledged acquire that could have made them.
	missing := 0
	if n := len(tokens); n > 0 {
		missing = int(tokens[n-1]) - n
	}
	if missing > totalMaybeAcquires {
		res.add(name, time.Time{}, "%d tokens up to %d were never seen, but only %d acquires went unanswered", missing, tokens[len(tokens)-1], totalMaybeAcquires)
	}
	for _, t := range tokens {
		h := hs[t]
		if !ackAcquired[t] && maybeAcquires[h.holder] == 0 {
			res.add(name, h.acquire, "token %d held by %q (shown by %s) but %q was never told it acquired it and sent no unanswered acquire", t, h.holder, h.where, h.holder)
		}
	}
	for i := 1; i < len(tokens); i++ {
		prev, next := hs[tokens[i-1]], hs[tokens[i]]
		if next.acquire.Before(prev.acquire) {
			res.add(name, next.acquire, "token %d acquired at %s, before token %d at %s", next.token, fmtTime(next.acquire), prev.token, fmtTime(prev.acquire))
		}
		if prev.seenLive && next.acquire.Before(prev.live) {
			res.add(name, next.acquire, "token %d (%q) shown live at server time %s (by %s), but token %d (%q) began at %s (shown by %s): the holdings overlap, or that answer is stale",
				prev.token, prev.holder, fmtTime(prev.live), prev.liveWhere, next.token, next.holder, fmtTime(next.acquire), next.where)
		}
		if prev.readSeenLive && next.acquire.Before(prev.readLive) {
			res.add(name, next.acquire, "token %d (%q) shown live at server time %s (by %s), but token %d (%q) began at %s (shown by %s): a stale read",
				prev.token, prev.holder, fmtTime(prev.readLive), prev.readLiveWhere, next.token, next.holder, fmtTime(next.acquire), next.where)
		}
		if end, ok := acknowledgedEnd(es, prev); ok && !sess[prev.holder] && next.acquire.Before(end) {
			res.add(name, next.acquire, "holdings overlap: token %d (%q) was extended to %s by its holder's last acknowledged write, but token %d (%q) began at %s (%s)",
				prev.token, prev.holder, fmtTime(end), next.token, next.holder, fmtTime(next.acquire), next.where)
		}
	}
	if hasFinal {
		checkFinal(res, name, es, final, maxAck, sess)
	}
	checkTerms(res, name, hs, tokens, terms)
	checkSuccession(res, name, es, hs, final)
	return len(tokens)
}

// acknowledgedEnd returns the expireTime that h's holder's last
// acknowledged write of h set: a lower bound of where h really ended, as
// long as no unacknowledged release of h could have cut it short (an
// unacknowledged renew or acquire can only extend it).
func acknowledgedEnd(es []Entry, h *holding) (time.Time, bool) {
	var last *Entry
	for i := range es {
		e := &es[i]
		if e.Holder != h.holder {
			continue
		}
		if e.Outcome == Maybe && (e.Op == Release || e.Op == Transfer) && e.Token == h.token {
			return time.Time{}, false
		}
		if e.Outcome == OK && e.Op != Get && e.Lease.FencingToken == h.token {
			last = e
		}
	}
	if last == nil {
		return time.Time{}, false
	}
	return last.Lease.ExpireTime, true
}

// checkFinal checks the lease read after the run against what was
// acknowledged. A session holder's holding is compared as a holding
// (holder, token, acquire time): its instance renews and ends it unseen.
func checkFinal(res *Result, name string, es []Entry, final *lease.Lease, maxAck int64, sess map[string]bool) {
	if final == nil {
		if maxAck > 0 {
			res.add(name, time.Time{}, "the final read found no lease, but token %d was acknowledged", maxAck)
		}
		return
	}
	if final.FencingToken < maxAck {
		res.add(name, final.ServerTime, "the final read shows token %d, but token %d was acknowledged", final.FencingToken, maxAck)
		return
	}
	if final.FencingToken != maxAck {
		return // an unacknowledged acquire made a newer holding; checked above
	}
	var last *Entry
	for i := range es {
		e := &es[i]
		if e.Outcome == OK && e.Op != Get && e.Lease.FencingToken == maxAck && e.Lease.Holder == final.Holder {
			last = e
		}
	}
	if last == nil {
		return
	}
	for _, e := range es {
		if e.Holder == last.Holder && e.Outcome == Maybe {
			return // it may have landed after the last acknowledged write
		}
	}
	got, want := recordOf(final), recordOf(last.Lease)
	if sess[last.Holder] {
		if !sameHolding(got, want) || got.lastWrite().Before(want.lastWrite()) {
			res.add(name, last.Lease.ServerTime, "the final read shows %s, but the last acknowledged write (%s) left %s of a session holder", fmtRecord(got), describe(*last), fmtRecord(want))
		}
		return
	}
	if got != want {
		res.add(name, last.Lease.ServerTime, "the final read shows %s, but the last acknowledged write (%s) left %s", fmtRecord(got), describe(*last), fmtRecord(want))
	}
}

// checkAnswer checks one answer against the rules of its operation.
func checkAnswer(res *Result, e Entry) {
	l := e.Lease
	r := recordOf(l)
	s := l.ServerTime
	held := s.Before(l.ExpireTime)
	bad := func(format string, args ...any) {
		res.add(e.Name, s, "%s: %s (answer %s)", describe(e), fmt.Sprintf(format, args...), fmtLease(l))
	}
	if l.Name != "" && l.Name != e.Name {
		bad("answer names lease %q", l.Name)
	}
	if l.FencingToken < 1 || l.Transitions != l.FencingToken {
		bad("transitions %d differ from the fencing token %d of a lease this history created", l.Transitions, l.FencingToken)
	}
	if r.acquire.After(r.renew) || r.renew.After(r.expire) || r.expire.After(r.renew.Add(r.ttl)) {
		bad("times out of order: acquire ≤ renew ≤ expire ≤ renew + ttl does not hold")
	}
	if r.lastWrite().After(s) {
		bad("serverTime is before the decision time %s of the write it shows", fmtTime(r.lastWrite()))
	}
	switch {
	case e.Outcome == OK && e.Op == Acquire:
		if l.Holder != e.Holder || !held || !l.RenewTime.Equal(s) || !l.ExpireTime.Equal(s.Add(e.TTL)) || l.TTL != e.TTL {
			bad("an acquire must answer a live holding of the caller renewed at serverTime for the ttl asked (%v)", e.TTL)
		}
	case e.Outcome == OK && e.Op == Renew:
		ttl := e.TTL
		if ttl == 0 {
			ttl = l.TTL
		}
		if l.Holder != e.Holder || l.FencingToken != e.Token || !held || !l.RenewTime.Equal(s) || !l.ExpireTime.Equal(s.Add(ttl)) || l.TTL != ttl {
			bad("a renew must answer the caller's live holding renewed at serverTime for the ttl (%v)", ttl)
		}
	case e.Outcome == OK && e.Op == Release:
		if l.Holder != e.Holder || l.FencingToken != e.Token || held {
			bad("a release must answer the caller's holding, ended")
		}
	case e.Outcome == OK && e.Op == Transfer:
		if l.Holder != e.Holder || l.FencingToken != e.Token || held {
			bad("a transfer must answer the caller's holding, ended")
		}
		if l.ReservedFor != "" && l.ReservedFor != e.To {
			bad("a transfer to %q answered a reservation for %q", e.To, l.ReservedFor)
		}
		if l.ExpireTime.Equal(s) && (l.ReservedFor != e.To || !l.ReservedUntil.After(s)) {
			bad("a transfer that ended the holding at serverTime must show the lease reserved for %q", e.To)
		}
	case e.Outcome == Held:
		if e.Op != Acquire || l.Holder == e.Holder || !held {
			bad("lease_held must show a live holding of another holder")
		}
	case e.Outcome == Reserved:
		if e.Op != Acquire || held || l.ReservedFor == "" || l.ReservedFor == e.Holder || !s.Before(l.ReservedUntil) {
			bad("lease_reserved must show a free lease reserved for another holder until after serverTime")
		}
	}
	if e.Outcome == OK && e.Checkpoint != nil && (e.Op == Renew || e.Op == Release || e.Op == Transfer) {
		if l.CheckpointToken != e.Token || !sameJSON(l.Checkpoint, e.Checkpoint) {
			bad("an acknowledged checkpoint write must answer its checkpoint %s with checkpointToken %d, not %s with %d",
				e.Checkpoint, e.Token, l.Checkpoint, l.CheckpointToken)
		}
	}
}

// describe names an entry in messages.
func describe(e Entry) string {
	var s string
	switch e.Op {
	case Acquire:
		s = fmt.Sprintf("client %d acquire by %q ttl %v", e.Client, e.Holder, e.TTL)
		if e.Priority != 0 || e.Preempt {
			s += fmt.Sprintf(" priority %d preempt %v", e.Priority, e.Preempt)
		}
	case Renew, Release:
		s = fmt.Sprintf("client %d %s by %q token %d", e.Client, e.Op, e.Holder, e.Token)
	case Transfer:
		s = fmt.Sprintf("client %d transfer by %q token %d to %q", e.Client, e.Holder, e.Token, e.To)
	case Led:
		return describeTerm(e)
	default:
		s = fmt.Sprintf("client %d %s", e.Client, e.Op)
	}
	if e.Checkpoint != nil {
		s += " checkpoint " + string(e.Checkpoint)
	}
	if e.Note != "" {
		s += " (" + e.Note + ")"
	}
	return s
}

// Dump lists the entries of lease name around server time at (± d), in
// time order: the evidence around a violation. An answer with a lease is
// placed at its server time; one without (lease_lost, unanswered) at its
// call's wall-clock time, which is comparable only where the caller and the
// backend share a clock (a local emulator).
func Dump(entries []Entry, name string, at time.Time, d time.Duration) string {
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	for _, e := range entries {
		if e.Name != name {
			continue
		}
		t, text := e.Call, fmt.Sprintf("%s → %s (call at %s, client clock)", describe(e), e.Outcome, e.Call.UTC().Format("15:04:05.000000"))
		if e.Lease != nil {
			t, text = e.Lease.ServerTime, fmt.Sprintf("%s → %s %s", describe(e), e.Outcome, fmtLease(e.Lease))
		}
		if t.Sub(at).Abs() <= d {
			lines = append(lines, line{t, fmtTime(t) + " " + text})
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	return b.String()
}

func fmtTime(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

func fmtRecord(r record) string {
	return fmt.Sprintf("{holder %q token %d ttl %v acquire %s renew %s expire %s}", r.holder, r.token, r.ttl, fmtTime(r.acquire), fmtTime(r.renew), fmtTime(r.expire))
}

func fmtLease(l *lease.Lease) string {
	s := fmt.Sprintf("{holder %q token %d ttl %v acquire %s renew %s expire %s server %s transitions %d",
		l.Holder, l.FencingToken, l.TTL, fmtTime(l.AcquireTime), fmtTime(l.RenewTime), fmtTime(l.ExpireTime), fmtTime(l.ServerTime), l.Transitions)
	if l.Checkpoint != nil {
		s += fmt.Sprintf(" checkpoint %s (token %d)", l.Checkpoint, l.CheckpointToken)
	}
	if l.ReservedFor != "" {
		s += fmt.Sprintf(" reserved for %q until %s", l.ReservedFor, fmtTime(l.ReservedUntil))
	}
	return s + "}"
}
