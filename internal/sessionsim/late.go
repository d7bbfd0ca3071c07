package sessionsim

import (
	"context"
	"strconv"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// Two classes of faults of the instances' own work (issue 44):
//
//   - every answer can be late: a call of an instance to the backend is
//     decided when it arrives and answered any time later (Late);
//   - any push can fall between two steps of an operation: an instance
//     stalls between deciding an answer and queuing it (Stall), and what
//     it pushes meanwhile (a renewal that finds the lease gone, an event)
//     goes out first.

// LateOps are the operations Late can pick: every session.Backend
// method, and "" for any of them.
var LateOps = []string{"", "Acquire", "Renew", "Release", "Transfer", "Expire", "TakeOver", "Get"}

// lateRule makes the next n calls of op ("" for any) answered d late.
type lateRule struct {
	op string
	n  int
	d  time.Duration
}

// Late makes the answers of instance k's next n calls of op to the
// backend (a session.Backend method, "" for any) reach it d late: the
// backend decides each at once, and its answer arrives d after it would
// have, or never if the call's context ends first.
func (w *World) Late(k int, op string, n int, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	in := w.Insts[k]
	in.lates = append(in.lates, lateRule{op: op, n: n, d: d})
	what := op
	if what == "" {
		what = "any call"
	}
	w.logf("instance %d: the next %d answers of %s come %v late", k, n, what, d)
}

// late returns how late the answer of the call of op that is deciding now
// comes, using up a rule of Late.
func (in *Instance) late(op string) time.Duration {
	in.w.mu.Lock()
	defer in.w.mu.Unlock()
	for i := range in.lates {
		r := &in.lates[i]
		if r.op != "" && r.op != op {
			continue
		}
		d := r.d
		if r.n--; r.n == 0 {
			in.lates = append(in.lates[:i:i], in.lates[i+1:]...)
		}
		return d
	}
	return 0
}

// stallRule makes the next n answers that carry a proof wait d.
type stallRule struct {
	n int
	d time.Duration
}

// Stall makes instance k stall d in each of its next n answers that start
// a holding (an acquire's result, a resumed answer's leases), after the
// operation decided them and before they are queued: the instance signs
// their proofs there (httpapi.Proofs), and the simulation's signer is then
// slow, as a starved or descheduled process would be.
func (w *World) Stall(k, n int, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Insts[k].stalls = append(w.Insts[k].stalls, stallRule{n: n, d: d})
	w.logf("instance %d: the next %d answers that start a holding stall %v", k, n, d)
}

// stall returns how long the answer being signed now stalls, using up a
// rule of Stall.
func (in *Instance) stall() time.Duration {
	in.w.mu.Lock()
	defer in.w.mu.Unlock()
	if len(in.stalls) == 0 {
		return 0
	}
	r := &in.stalls[0]
	d := r.d
	if r.n--; r.n == 0 {
		in.stalls = in.stalls[1:]
	}
	return d
}

// signer is an instance's httpapi.Proofs: the agents verify no proof, so
// it signs nothing; it is where an answer that starts a holding stalls
// (Stall).
type signer struct{ in *Instance }

// Sign returns a stand-in for the proof of l's holding, after the stall
// Stall asked for, if any (Close ends it).
func (s signer) Sign(l lease.Lease) (string, error) {
	if d := s.in.stall(); d > 0 {
		s.in.w.logf("instance %d: the answer with %s token %d stalls %v before it is queued", s.in.K, l.Name, l.FencingToken, d)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.in.w.lifted:
		}
	}
	return "sessionsim." + l.Name + "." + strconv.FormatInt(l.FencingToken, 10), nil
}

// JWKS lists no key.
func (signer) JWKS(context.Context, string) ([]byte, error) { return []byte(`{"keys":[]}`), nil }

// clearLate lifts the faults of Late and Stall, those under way too (the
// answers on their way arrive, the stalls end); w.mu held.
func (w *World) clearLate() {
	for _, in := range w.Insts {
		in.lates, in.stalls = nil, nil
	}
	select {
	case <-w.lifted:
	default:
		close(w.lifted)
	}
}
