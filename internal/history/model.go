package history

import (
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Linearizability is the answer of the porcupine checker.
type Linearizability struct {
	// Result is porcupine.Ok when every lease's history is linearizable,
	// porcupine.Illegal when one is not, porcupine.Unknown when the checker
	// ran out of time on one (and found none illegal).
	Result porcupine.CheckResult
	// Illegal names the leases whose history is not linearizable.
	Illegal []string
	// Unknown names the leases the checker did not finish.
	Unknown []string
}

// Linearizable checks, lease by lease, that the history is linearizable
// with respect to a model of one lease (below), giving the checker at most
// timeout per lease. It is a second opinion beside Check.
//
// The model's state is the stored record (holder, token, ttl, acquire,
// renew and expire times); each operation's input is what was sent, and
// its output is the answer with its server time. A step is legal when the
// rules of docs/contract.md §3, applied at the answer's server time to the state, give
// exactly the answer: an acquire of a lease that is absent or expired at
// that time makes token + 1 acquired then, a refusal shows the state, a
// renew extends the caller's live holding to serverTime + ttl, and so on.
// Every write's decision time is at or after the decision time of the write
// it replaces.
//
// An unanswered operation (Maybe) may take effect at any point after it
// was sent, at a server time nobody saw. The model is nondeterministic
// there: the lease is either unchanged, or changed by that operation at an
// unknown time, which the next answer that shows the lease pins down. After
// two unanswered operations in a row the model only knows that tokens never
// go back, until an answer shows the lease again. The model is exact
// wherever the lease is known and never stricter than the contract.
func Linearizable(entries []Entry, timeout time.Duration) Linearizability {
	out := Linearizability{Result: porcupine.Ok}
	for _, part := range partition(entries) {
		res := porcupine.CheckOperationsTimeout(leaseModel, part.ops, timeout)
		switch res {
		case porcupine.Illegal:
			out.Result = porcupine.Illegal
			out.Illegal = append(out.Illegal, part.name)
		case porcupine.Unknown:
			if out.Result == porcupine.Ok {
				out.Result = porcupine.Unknown
			}
			out.Unknown = append(out.Unknown, part.name)
		}
	}
	return out
}

// Visualize checks the history of one lease again and writes porcupine's
// HTML visualization of it (the longest linearizable prefixes and where they
// fail) to path.
func Visualize(entries []Entry, name, path string, timeout time.Duration) error {
	for _, part := range partition(entries) {
		if part.name != name {
			continue
		}
		_, info := porcupine.CheckOperationsVerbose(leaseModel, part.ops, timeout)
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("history: visualization: %w", err)
		}
		if err := porcupine.Visualize(leaseModel, info, f); err != nil {
			_ = f.Close()
			return fmt.Errorf("history: visualization of %s: %w", name, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("history: visualization: %w", err)
		}
		return nil
	}
	return fmt.Errorf("history: no lease %q in the history", name)
}

// part is the history of one lease as porcupine operations.
type part struct {
	name string
	ops  []porcupine.Operation
}

// partition turns the entries into porcupine operations, one list per
// lease. Times are nanoseconds since the first call; an unanswered
// operation never returns.
func partition(entries []Entry) []part {
	if len(entries) == 0 {
		return nil
	}
	base := entries[0].Call
	for _, e := range entries {
		if e.Call.Before(base) {
			base = e.Call
		}
	}
	byName := map[string][]porcupine.Operation{}
	sess := sessionHolders(entries)
	for _, e := range entries {
		if e.Op == Led { // a term, not an operation
			continue
		}
		op := porcupine.Operation{
			ClientId: e.Client,
			Input:    input{op: e.Op, holder: e.Holder, token: e.Token, ttl: e.TTL},
			Call:     int64(e.Call.Sub(base)),
			Return:   math.MaxInt64,
			Output:   output{outcome: e.Outcome},
		}
		if e.Outcome != Maybe {
			op.Return = max(int64(e.Return.Sub(base)), op.Call)
		}
		if e.Lease != nil {
			rec := recordOf(e.Lease)
			rec.session = sess[rec.holder]
			op.Output = output{outcome: e.Outcome, rec: rec, server: e.Lease.ServerTime.UTC().Round(0), hasLease: true}
		}
		byName[e.Name] = append(byName[e.Name], op)
	}
	names := sortedNames(byName)
	parts := make([]part, 0, len(names))
	for _, n := range names {
		parts = append(parts, part{name: n, ops: byName[n]})
	}
	return parts
}

// input is what an operation sent.
type input struct {
	op     Op
	holder string
	token  int64
	ttl    time.Duration
}

// output is what an operation was answered.
type output struct {
	outcome  Outcome
	rec      record
	server   time.Time
	hasLease bool
}

// stateKind tells the model's candidate states apart.
type stateKind int

const (
	absent   stateKind = iota // no record
	known                     // rec is the record
	unseen                    // base (rec, or no record if baseAbsent) changed by pending at an unknown time
	anything                  // any record with a token ≥ minToken
)

// state is one candidate state of the lease.
type state struct {
	kind       stateKind
	rec        record
	baseAbsent bool
	pending    input
	minToken   int64
}

func (s state) equal(o state) bool {
	return s.kind == o.kind && recEqual(s.rec, o.rec) && s.baseAbsent == o.baseAbsent && s.pending == o.pending && s.minToken == o.minToken
}

func recEqual(a, b record) bool {
	return a.holder == b.holder && a.token == b.token && a.ttl == b.ttl && a.acquire.Equal(b.acquire) &&
		a.renew.Equal(b.renew) && a.expire.Equal(b.expire) && a.transitions == b.transitions
}

// leaseModel is the model of one lease described at Linearizable.
var leaseModel = func() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{state{kind: absent}} },
		Step: func(st, in, out any) []any {
			return step(st.(state), in.(input), out.(output))
		},
		Equal: func(a, b any) bool { return a.(state).equal(b.(state)) },
		Hash: func(st any) uint64 {
			s := st.(state)
			h := fnv.New64a()
			_, _ = fmt.Fprintf(h, "%d/%s/%d/%d", s.kind, s.rec.holder, s.rec.token, s.minToken)
			return h.Sum64()
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(input), out.(output)
			s := fmt.Sprintf("%s(%s", i.op, i.holder)
			if i.op == Renew || i.op == Release || i.op == Transfer {
				s += fmt.Sprintf(", %d", i.token)
			}
			s += ") → " + o.outcome.String()
			if o.hasLease {
				s += fmt.Sprintf(" %s@%s", o.rec.holder, fmtTime(o.server))
				s += fmt.Sprintf(" t%d exp %s", o.rec.token, fmtTime(o.rec.expire))
			}
			return s
		},
		DescribeState: func(st any) string {
			s := st.(state)
			switch s.kind {
			case absent:
				return "absent"
			case known:
				return fmtRecord(s.rec)
			case unseen:
				return fmt.Sprintf("after unanswered %s(%s) on %s", s.pending.op, s.pending.holder, fmtRecord(s.rec))
			}
			return fmt.Sprintf("any with token ≥ %d", s.minToken)
		},
	}
	return nm.ToModel()
}()

// step returns the states the lease may be in after an operation with
// input in and output out, from state s; none when the answer is
// impossible from s.
func step(s state, in input, out output) []any {
	switch out.outcome {
	case Maybe:
		next := []any{s} // not (yet) applied
		switch s.kind {
		case absent:
			if in.op == Acquire {
				next = append(next, state{kind: unseen, baseAbsent: true, pending: in})
			}
		case known:
			if mayApply(s.rec, in) {
				next = append(next, state{kind: unseen, rec: s.rec, pending: in})
			}
		case unseen:
			next = append(next, state{kind: anything, minToken: s.rec.token})
		}
		return next
	case NotFound:
		if s.kind == absent {
			return []any{s}
		}
		return nil
	case Lost:
		return lost(s, in)
	}
	if !out.hasLease {
		return nil
	}
	r := out.rec
	if r.lastWrite().After(out.server) {
		return nil
	}
	if out.outcome == Held || out.outcome == Reserved || in.op == Get {
		if out.outcome == Held && (r.holder == in.holder || !out.server.Before(r.expire)) {
			return nil
		}
		if out.outcome == Reserved && (in.op != Acquire || out.server.Before(r.expire)) {
			return nil // a reservation holds only a free lease
		}
		if shows(s, r) || (s.kind == known && sessionShows(s.rec, r)) {
			return []any{state{kind: known, rec: r}}
		}
		return nil
	}
	// An acknowledged acquire, renew or release.
	switch s.kind {
	case absent, known:
		var cur *record
		if s.kind == known {
			cur = &s.rec
		}
		if got, ok := apply(cur, in, out.server); ok && recEqual(got, r) {
			return []any{state{kind: known, rec: r}}
		}
		if s.kind == known && sessionApply(s.rec, in, out) {
			return []any{state{kind: known, rec: r}}
		}
		if first, ok := sessionRenewedAcquire(cur, in, out); ok {
			return []any{state{kind: known, rec: first}}
		}
		return nil
	case unseen:
		if r.token >= s.rec.token && (s.baseAbsent || !out.server.Before(s.rec.lastWrite())) {
			return []any{state{kind: known, rec: r}}
		}
		return nil
	}
	if r.token >= s.minToken {
		return []any{state{kind: known, rec: r}}
	}
	return nil
}

// lost returns the states from which a renew, release or transfer may be
// answered lease_lost. A release of the caller's own holding always
// succeeds, unless it is held through a session (the instance may have
// moved or ended it unseen); a renew of it fails once it has expired, at a
// server time nobody saw; a transfer of it fails once it has ended
// otherwise.
func lost(s state, in input) []any {
	if in.op != Renew && in.op != Release && in.op != Transfer {
		return nil
	}
	if s.kind == known && in.op == Release && s.rec.holder == in.holder && s.rec.token == in.token && !s.rec.session {
		return nil
	}
	return []any{s}
}

// mayApply reports whether an unanswered operation could change the
// record r at some server time.
func mayApply(r record, in input) bool {
	switch in.op {
	case Acquire:
		return true
	case Renew, Release, Transfer:
		return r.holder == in.holder && r.token == in.token && r.lastWrite().Before(r.expire)
	}
	return false
}

// shows reports whether a read may show r from state s.
func shows(s state, r record) bool {
	switch s.kind {
	case known:
		return recEqual(s.rec, r)
	case unseen:
		var base *record
		if !s.baseAbsent {
			base = &s.rec
		}
		return unseenShows(base, s.pending, r)
	case anything:
		return r.token >= s.minToken
	}
	return false
}

// unseenShows reports whether the record r can be what in made of base at
// some server time: the time of that decision is read back from r.
func unseenShows(base *record, in input, r record) bool {
	for _, at := range []time.Time{r.acquire, r.renew, r.expire} {
		if got, ok := apply(base, in, at); ok && recEqual(got, r) {
			return true
		}
	}
	return false
}

// apply applies the rules of docs/contract.md §3 for in at server time now to the
// record cur (nil: none). It returns the record after an acknowledged
// answer, or false when the operation is refused at now, or now is before
// the decision time of cur (a decision is never older than what it read).
func apply(cur *record, in input, now time.Time) (record, bool) {
	if cur != nil && now.Before(cur.lastWrite()) {
		return record{}, false
	}
	switch in.op {
	case Acquire:
		switch {
		case cur == nil:
			return record{holder: in.holder, token: 1, ttl: in.ttl, acquire: now, renew: now, expire: now.Add(in.ttl), transitions: 1}, true
		case now.Before(cur.expire) && cur.holder != in.holder:
			return record{}, false
		case now.Before(cur.expire):
			next := *cur
			next.ttl, next.renew, next.expire = in.ttl, now, now.Add(in.ttl)
			return next, true
		}
		return record{holder: in.holder, token: cur.token + 1, ttl: in.ttl, acquire: now, renew: now, expire: now.Add(in.ttl), transitions: cur.transitions + 1}, true
	case Renew:
		if cur == nil || cur.holder != in.holder || cur.token != in.token || !now.Before(cur.expire) {
			return record{}, false
		}
		next := *cur
		if in.ttl != 0 {
			next.ttl = in.ttl
		}
		next.renew, next.expire = now, now.Add(next.ttl)
		return next, true
	case Release, Transfer:
		// A transfer ends the holding as a release does; repeated on the
		// holding it ended, it changes nothing (or is refused lease_lost,
		// which lost allows).
		if cur == nil || cur.holder != in.holder || cur.token != in.token {
			return record{}, false
		}
		next := *cur
		if now.Before(cur.expire) {
			next.expire = now
		}
		return next, true
	}
	return record{}, false
}

// sortedNames returns the keys of m in order.
func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
