package lease

import (
	"errors"
	"testing"
	"time"
)

// The decisions of decide.go against the rows of docs/contract.md §3, §8,
// §14 and §15, with no backend and no clock: each row names the line of
// docs/contract.md it checks, the stored record, the request and the
// server time, and what the decision must answer.

// t0 is the server time of the decisions.
var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

const (
	ttl  = 10 * time.Second
	ttl2 = 20 * time.Second
	key1 = "abababababababababababababababababababababababababababababababab"
	key2 = "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
)

// holding returns the live holding of "x" by holder "a" as principal "p",
// token 4, with metadata, a checkpoint of token 3 and priority 2, renewed
// 5 s before t0 with a TTL of 10 s, changed by each of change in turn.
func holding(change ...func(*Record)) *Record {
	r := &Record{Name: "x", Holder: "a", Principal: "p", FencingToken: 4, Transitions: 4, TTL: ttl,
		AcquireTime: t0.Add(-time.Minute), RenewTime: t0.Add(-5 * time.Second), ExpireTime: t0.Add(5 * time.Second),
		Metadata: []byte(`{"m":1}`), Checkpoint: []byte(`{"c":1}`), CheckpointToken: 3, Priority: 2}
	for _, c := range change {
		c(r)
	}
	return r
}

// ranOut makes the holding run out exactly at t0.
func ranOut(r *Record) { r.RenewTime, r.ExpireTime = t0.Add(-ttl), t0 }

// releasedAt makes the holding end by a release d before t0.
func releasedAt(d time.Duration) func(*Record) {
	return func(r *Record) { r.ExpireTime = t0.Add(-d) }
}

// revoked makes the holding revoked 1 s before t0.
func revoked(r *Record) {
	r.ExpireTime, r.RevokedBy, r.RevokeReason = t0.Add(-time.Second), "op", "stuck"
}

// reserved records a transfer's reservation for who as principal until t0 + d.
func reserved(who, principal string, d time.Duration) func(*Record) {
	return func(r *Record) {
		r.ReservedFor, r.ReservedPrincipal, r.ReservedUntil = who, principal, t0.Add(d)
	}
}

// through makes the holding held through session key at epoch.
func through(key string, epoch int64) func(*Record) {
	return func(r *Record) { r.SessionKey, r.SessionEpoch, r.SessionWindow = key, epoch, time.Second }
}

// with registers candidates.
func with(cs ...Candidate) func(*Record) {
	return func(r *Record) { r.Candidates = cs }
}

// cand is a registration of holder by principal with priority, waiting
// since t0 + since until t0 + until.
func cand(id, holder, principal string, priority int, preempt bool, since, until time.Duration) Candidate {
	return Candidate{ID: id, Holder: holder, Principal: principal, Priority: priority, Preempt: preempt,
		Since: t0.Add(since), Until: t0.Add(until)}
}

// tomb is what deleting a holding that ran out at t0 - 1 min leaves.
func tomb() *Record {
	return tombstone(holding(releasedAt(time.Minute)), t0.Add(-30*time.Second))
}

// ref is session key at epoch, window 1 s.
func ref(key string, epoch int64) *SessionRef {
	return &SessionRef{Key: key, Epoch: epoch, Window: time.Second}
}

// result is what a decision answered.
type result struct {
	next  *Record
	ended bool
	err   error
}

// decisionRow is one line of docs/contract.md and the decision that must
// answer it.
type decisionRow struct {
	contract string // the line of docs/contract.md checked, as "§N topic: rule"
	decide   func() result
	err      error                            // errors.Is target; nil: success
	write    bool                             // a record is written (get: a lease is shown)
	ended    bool                             // decideEnd: the write ends the holding
	check    func(t *testing.T, next *Record) // what is written, when write
}

func acquire(stored *Record, req AcquireRequest, md string, at time.Time) func() result {
	return func() result {
		in := acquireInput{req: req, maxCandidates: DefaultMaxCandidates}
		if md != "" {
			in.md = []byte(md)
		}
		next, err := decideAcquire(stored, in, at)
		return result{next: next, err: err}
	}
}

func candidate(stored *Record, req AcquireRequest, id string, waitLeft time.Duration, max int) func() result {
	return func() result {
		reg := &registration{id: id, priority: req.Priority, preempt: req.Preempt}
		next, err := decideAcquire(stored, acquireInput{req: req, reg: reg, waitLeft: waitLeft, maxCandidates: max}, t0)
		return result{next: next, err: err}
	}
}

func renew(stored *Record, req RenewRequest, md, cp string, at time.Time) func() result {
	return func() result {
		next, err := decideRenew(stored, req, bytesOrNil(md), bytesOrNil(cp), at)
		return result{next: next, err: err}
	}
}

func end(stored *Record, e endRequest, at time.Time) func() result {
	return func() result {
		next, ended, err := decideEnd(stored, e, at)
		return result{next: next, ended: ended, err: err}
	}
}

func revoke(stored *Record, req RevokeRequest) func() result {
	return func() result {
		next, err := decideRevoke(stored, req, t0)
		return result{next: next, err: err}
	}
}

func del(stored *Record, freeFor time.Duration) func() result {
	return func() result {
		next, err := decideDelete(stored, freeFor, t0)
		return result{next: next, err: err}
	}
}

func takeOver(stored *Record, req TakeOverRequest) func() result {
	return func() result {
		next, err := decideTakeOver(stored, req, t0)
		return result{next: next, err: err}
	}
}

func withdraw(stored *Record, id string) func() result {
	return func() result { return result{next: decideWithdraw(stored, id, t0)} }
}

func get(stored *Record) func() result {
	return func() result {
		l, err := decideGet(stored, t0)
		if err != nil {
			return result{err: err}
		}
		return result{next: &l.Record}
	}
}

func bytesOrNil(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// byA is the acquire of holder "a" as principal "p" for "x".
var byA = AcquireRequest{Name: "x", Holder: "a", Principal: "p", TTL: ttl2}

// byB is the acquire of another holder, "b" as principal "q".
var byB = AcquireRequest{Name: "x", Holder: "b", Principal: "q", TTL: ttl2}

// as returns a copy of req changed by change.
func as[R any](req R, change func(*R)) R {
	change(&req)
	return req
}

// mine is the renew of holding()'s holder with its token and principal.
var mine = RenewRequest{Name: "x", Holder: "a", Principal: "p", FencingToken: 4}

// release is the release of holding()'s holder with its token and principal.
var release = endRequest{holder: "a", principal: "p", token: 4}

// transfer is holding()'s transfer to "b" as principal "q" for 3 s.
var transfer = endRequest{holder: "a", principal: "p", token: 4, to: "b", toPrincipal: "q", reserve: 3 * time.Second}

// resume is the takeover of holding() through session key1 at epoch 2.
var resume = TakeOverRequest{Name: "x", Holder: "a", Principal: "p", FencingToken: 4, TTL: ttl2, Session: *ref(key1, 2)}

// newHolding checks a new holding of holder by principal with token.
func newHolding(holder, principal string, token, transitions int64) func(*testing.T, *Record) {
	return func(t *testing.T, n *Record) {
		t.Helper()
		if n.Holder != holder || n.Principal != principal || n.FencingToken != token || n.Transitions != transitions {
			t.Errorf("holding %s/%s token %d transitions %d, want %s/%s %d %d", n.Holder, n.Principal, n.FencingToken, n.Transitions, holder, principal, token, transitions)
		}
		if !n.AcquireTime.Equal(t0) || !n.RenewTime.Equal(t0) || !n.ExpireTime.Equal(t0.Add(n.TTL)) {
			t.Errorf("times %v %v %v, want acquire = renew = %v, expire + ttl", n.AcquireTime, n.RenewTime, n.ExpireTime, t0)
		}
		if n.RevokedBy != "" || n.RevokeReason != "" || n.ReservedFor != "" || !n.ReservedUntil.IsZero() {
			t.Errorf("a new holding carries revocation %q/%q or reservation %q", n.RevokedBy, n.RevokeReason, n.ReservedFor)
		}
	}
}

// all runs every check.
func all(checks ...func(*testing.T, *Record)) func(*testing.T, *Record) {
	return func(t *testing.T, n *Record) {
		t.Helper()
		for _, c := range checks {
			c(t, n)
		}
	}
}

func expiresAt(at time.Time) func(*testing.T, *Record) {
	return func(t *testing.T, n *Record) {
		t.Helper()
		if !n.ExpireTime.Equal(at) {
			t.Errorf("expireTime %v, want %v", n.ExpireTime, at)
		}
	}
}

func checkpoint(cp string, token int64) func(*testing.T, *Record) {
	return func(t *testing.T, n *Record) {
		t.Helper()
		if string(n.Checkpoint) != cp || n.CheckpointToken != token {
			t.Errorf("checkpoint %s of token %d, want %s of %d", n.Checkpoint, n.CheckpointToken, cp, token)
		}
	}
}

func metadata(md string) func(*testing.T, *Record) {
	return func(t *testing.T, n *Record) {
		t.Helper()
		if string(n.Metadata) != md {
			t.Errorf("metadata %s, want %s", n.Metadata, md)
		}
	}
}

func session(key string, epoch int64) func(*testing.T, *Record) {
	return func(t *testing.T, n *Record) {
		t.Helper()
		if n.SessionKey != key || n.SessionEpoch != epoch || (key == "") != (n.SessionWindow == 0) {
			t.Errorf("session %q epoch %d window %v, want %q epoch %d", n.SessionKey, n.SessionEpoch, n.SessionWindow, key, epoch)
		}
	}
}

// candidates checks the registrations by ID, in any order.
func candidates(ids ...string) func(*testing.T, *Record) {
	return func(t *testing.T, n *Record) {
		t.Helper()
		got := map[string]bool{}
		for _, c := range n.Candidates {
			got[c.ID] = true
		}
		ok := len(got) == len(ids) && len(n.Candidates) == len(ids)
		for _, id := range ids {
			ok = ok && got[id]
		}
		if !ok {
			t.Errorf("candidates %+v, want IDs %v", n.Candidates, ids)
		}
	}
}

// registered checks the registration id: waiting since t0 + since until t0 + until.
func registered(id string, since, until time.Duration) func(*testing.T, *Record) {
	return func(t *testing.T, n *Record) {
		t.Helper()
		for _, c := range n.Candidates {
			if c.ID == id {
				if !c.Since.Equal(t0.Add(since)) || !c.Until.Equal(t0.Add(until)) {
					t.Errorf("candidate %s waits %v … %v, want %v … %v", id, c.Since, c.Until, t0.Add(since), t0.Add(until))
				}
				return
			}
		}
		t.Errorf("candidate %s is not registered: %+v", id, n.Candidates)
	}
}

// yieldTo checks what the written record shows at t0 as the yield request.
func yieldTo(holder string) func(*testing.T, *Record) {
	return func(t *testing.T, n *Record) {
		t.Helper()
		if got := ViewAt(n, t0).YieldTo(); got != holder {
			t.Errorf("yieldTo %q, want %q", got, holder)
		}
	}
}

// reservedFor checks what the written record shows at t0 + d as its reservation.
func reservedFor(d time.Duration, who string, until time.Time) func(*testing.T, *Record) {
	return func(t *testing.T, n *Record) {
		t.Helper()
		got, u := ViewAt(n, t0.Add(d)).Reservation()
		if got != who || who != "" && !u.Equal(until) {
			t.Errorf("reserved for %q until %v, want %q until %v", got, u, who, until)
		}
	}
}

func TestDecideAcquire(t *testing.T) {
	runDecisions(t, []decisionRow{
		{contract: "§3 acquire: absent: the caller becomes holder, fencingToken 1, transitions 1, acquireTime = renewTime = serverTime, expireTime = serverTime + ttl, metadata as given",
			decide: acquire(nil, byA, `{"k":"v"}`, t0), write: true,
			check: all(newHolding("a", "p", 1, 1), metadata(`{"k":"v"}`), checkpoint("", 0))},
		{contract: "§3 acquire: metadata as given (none if omitted)",
			decide: acquire(nil, byA, "", t0), write: true, check: metadata("")},
		{contract: "§3 acquire: serverTime ≥ expireTime (ran out exactly now): fencingToken + 1, transitions + 1",
			decide: acquire(holding(ranOut), byB, "", t0), write: true, check: newHolding("b", "q", 5, 5)},
		{contract: "§3 acquire: the new holding records the caller's principal and starts without revokedBy or revokeReason",
			decide: acquire(holding(revoked), byB, "", t0), write: true, check: newHolding("b", "q", 5, 5)},
		{contract: "§3 acquire: held by another holder: lease_held, carrying the current lease",
			decide: acquire(holding(), byB, "", t0), err: ErrHeld},
		{contract: "§3 acquire: held by the same holder name under another principal: lease_held",
			decide: acquire(holding(), as(byA, func(r *AcquireRequest) { r.Principal = "q" }), "", t0), err: ErrHeld},
		{contract: "§3 acquire: held by the same holder and principal: idempotent, same token and acquireTime; ttl and expireTime set as renew sets them; omitted metadata keeps the stored",
			decide: acquire(holding(), byA, "", t0), write: true,
			check: func(t *testing.T, n *Record) {
				if n.FencingToken != 4 || n.Transitions != 4 || !n.AcquireTime.Equal(t0.Add(-time.Minute)) || n.TTL != ttl2 ||
					!n.RenewTime.Equal(t0) || !n.ExpireTime.Equal(t0.Add(ttl2)) || string(n.Metadata) != `{"m":1}` {
					t.Errorf("repeat acquire wrote %+v", n)
				}
			}},
		{contract: "§3 acquire: repeat by the holder: given metadata replaces the stored",
			decide: acquire(holding(), byA, `{"n":2}`, t0), write: true, check: metadata(`{"n":2}`)},
		{contract: "§8 Priority: a holding records the priority it was acquired with",
			decide: acquire(holding(ranOut), as(byB, func(r *AcquireRequest) { r.Priority = 7 }), "", t0), write: true,
			check: func(t *testing.T, n *Record) {
				if n.Priority != 7 {
					t.Errorf("priority %d, want 7", n.Priority)
				}
			}},
		{contract: "§8 Checkpoint: it survives the end of the holding and is copied into the next holding",
			decide: acquire(holding(releasedAt(time.Minute)), byB, "", t0), write: true, check: checkpoint(`{"c":1}`, 3)},
		{contract: "§15: the next acquire of a deleted name begins a holding with the deleted token + 1 and transitions + 1; the checkpoint and candidates went with the lease",
			decide: acquire(tomb(), byB, "", t0), write: true, check: all(newHolding("b", "q", 5, 5), checkpoint("", 0), candidates())},

		// §8 reservation.
		{contract: "§8 Reservation 1: after a transfer, anyone else's acquire is refused lease_reserved",
			decide: acquire(holding(releasedAt(time.Second), reserved("b", "q", 2*time.Second)), byA, "", t0), err: ErrReserved},
		{contract: "§8 Reservation: the same holder name from another principal is refused like anyone else",
			decide: acquire(holding(releasedAt(time.Second), reserved("b", "q", 2*time.Second)), as(byB, func(r *AcquireRequest) { r.Principal = "p" }), "", t0), err: ErrReserved},
		{contract: "§8 Reservation: the reserved holder's acquire, from the principal it is for, gets the lease with fencingToken + 1",
			decide: acquire(holding(releasedAt(time.Second), reserved("b", "q", 2*time.Second)), byB, "", t0), write: true,
			check: all(newHolding("b", "q", 5, 5), checkpoint(`{"c":1}`, 3))},
		{contract: "§8 Reservation 3: a transfer's reservation that lapsed opens the lease to everyone",
			decide: acquire(holding(releasedAt(10*time.Second), reserved("b", "q", 0)), byA, "", t0), write: true, check: newHolding("a", "p", 5, 5)},
		{contract: "§8 Reservation 2: for 5 s after expireTime the lease is reserved for the best live registered candidate (highest priority first)",
			decide: acquire(holding(releasedAt(time.Second), with(cand("1", "c", "r", 1, false, -time.Minute, time.Minute), cand("2", "b", "q", 9, false, -time.Second, time.Minute))),
				as(byB, func(r *AcquireRequest) { r.Holder, r.Principal = "c", "r" }), "", t0), err: ErrReserved},
		{contract: "§8 Reservation 2 and Candidates: the best candidate gets the lease, and only its own principal's registration leaves the list",
			decide: acquire(holding(releasedAt(time.Second), with(cand("1", "c", "r", 1, false, -time.Minute, time.Minute), cand("2", "b", "q", 9, false, -time.Second, time.Minute), cand("3", "b", "z", 0, false, 0, time.Minute))),
				byB, "", t0), write: true, check: all(newHolding("b", "q", 5, 5), candidates("1", "3"))},
		{contract: "§8 Order: equal priority ranks by earliest start of waiting",
			decide: acquire(holding(releasedAt(time.Second), with(cand("1", "c", "r", 5, false, -time.Minute, time.Minute), cand("2", "b", "q", 5, false, -time.Second, time.Minute))),
				byB, "", t0), err: ErrReserved},
		{contract: "§8 Order: equal priority and start rank by holder name in byte order",
			decide: acquire(holding(releasedAt(time.Second), with(cand("1", "c", "r", 5, false, 0, time.Minute), cand("2", "b", "q", 5, false, 0, time.Minute))),
				as(byB, func(r *AcquireRequest) { r.Holder, r.Principal = "c", "r" }), "", t0), err: ErrReserved},
		{contract: "§8 Reservation 2: never past the candidate's registration; then open",
			decide: acquire(holding(releasedAt(3*time.Second), with(cand("2", "b", "q", 9, false, -time.Minute, 0))), byA, "", t0), write: true,
			check: newHolding("a", "p", 5, 5)},
		{contract: "§8 Reservation 3: 5 s after the holding's expireTime the lease is open to anyone",
			decide: acquire(holding(releasedAt(ReserveWindow), with(cand("2", "b", "q", 9, false, -time.Minute, time.Minute))), byA, "", t0), write: true,
			check: all(newHolding("a", "p", 5, 5), candidates("2"))},
		{contract: "§8 Reservation 2: a holding that ended by revoke reserves for the best candidate too",
			decide: acquire(holding(revoked, with(cand("2", "b", "q", 0, false, -time.Minute, time.Minute))), byA, "", t0), err: ErrReserved},

		// §3 session-held holdings (§14).
		{contract: "§3 Session-held holdings: an acquire by its holder that does not come through that session is session_held and changes nothing",
			decide: acquire(holding(through(key1, 1)), byA, "", t0), err: ErrSessionHeld},
		{contract: "§3 Session-held holdings: an acquire by its holder through another session is session_held",
			decide: acquire(holding(through(key1, 1)), as(byA, func(r *AcquireRequest) { r.Session = ref(key2, 1) }), "", t0), err: ErrSessionHeld},
		{contract: "§14: a repeat acquire through the same session at an earlier epoch is lease_lost",
			decide: acquire(holding(through(key1, 2)), as(byA, func(r *AcquireRequest) { r.Session = ref(key1, 1) }), "", t0), err: ErrLost},
		{contract: "§14: a repeat acquire through the same session at a later epoch (the resume did not claim it) moves the holding to that epoch",
			decide: acquire(holding(through(key1, 1)), as(byA, func(r *AcquireRequest) { r.Session = ref(key1, 2) }), "", t0), write: true,
			check: all(expiresAt(t0.Add(ttl2)), session(key1, 2))},
		{contract: "§14: a repeat acquire through its session extends the holding, kept in the session",
			decide: acquire(holding(through(key1, 1)), as(byA, func(r *AcquireRequest) { r.Session = ref(key1, 1) }), "", t0), write: true,
			check: all(expiresAt(t0.Add(ttl2)), session(key1, 1))},
		{contract: "§14: a repeat acquire through a session of a plain holding joins it to the session",
			decide: acquire(holding(), as(byA, func(r *AcquireRequest) { r.Session = ref(key1, 3) }), "", t0), write: true, check: session(key1, 3)},
		{contract: "§14: a new holding through a session records it",
			decide: acquire(nil, as(byA, func(r *AcquireRequest) { r.Session = ref(key1, 1) }), "", t0), write: true, check: session(key1, 1)},
		{contract: "§14: a new holding not through a session is held through none, whatever the last one was",
			decide: acquire(holding(through(key1, 1), ranOut), byB, "", t0), write: true, check: session("", 0)},
		{contract: "§3 Session-held holdings: another holder's acquire of a live session-held holding is lease_held",
			decide: acquire(holding(through(key1, 1)), byB, "", t0), err: ErrHeld},
	})
}

func TestDecideCandidates(t *testing.T) {
	full := func() *Record {
		return holding(with(cand("1", "c", "r", 5, false, -time.Minute, time.Minute), cand("2", "d", "s", 3, false, -time.Minute, time.Minute)))
	}
	runDecisions(t, []decisionRow{
		{contract: "§8 Candidates: a waiting acquire that carries a priority registers in the lease record (holder, principal, priority, preempt, start of waiting, wait deadline) and is refused once that is written",
			decide: candidate(holding(), as(byB, func(r *AcquireRequest) { r.Priority, r.Preempt = 9, true }), "n", 30*time.Second, 64),
			err:    ErrHeld, write: true, check: all(registered("n", 0, 30*time.Second), yieldTo("b"))},
		{contract: "§8 Candidates: a wait deadline is server time: when it registered plus what remained of its waitMs",
			decide: candidate(holding(), byB, "n", 1500*time.Microsecond+300, 64), err: ErrHeld, write: true,
			check: registered("n", 0, 1500*time.Microsecond)},
		{contract: "§8 Candidates: a registration already written changes nothing: refused with no write",
			decide: candidate(holding(with(cand("n", "b", "q", 0, false, -time.Second, time.Minute))), byB, "n", 30*time.Second, 64), err: ErrHeld},
		{contract: "§8 Candidates: a newer request of the same holder by the same principal replaces the older one's and keeps its place in line",
			decide: candidate(holding(with(cand("old", "b", "q", 0, false, -time.Minute, time.Minute))), as(byB, func(r *AcquireRequest) { r.Priority = 4 }), "n", 30*time.Second, 64),
			err:    ErrHeld, write: true, check: all(candidates("n"), registered("n", -time.Minute, 30*time.Second))},
		{contract: "§8 Candidates: … also when the older one's wait ran out less than 2 s before",
			decide: candidate(holding(with(cand("old", "b", "q", 0, false, -time.Minute, -PlaceGrace+time.Millisecond))), byB, "n", 30*time.Second, 64),
			err:    ErrHeld, write: true, check: all(candidates("n"), registered("n", -time.Minute, 30*time.Second))},
		{contract: "§8 Candidates: a wait that ran out 2 s before or more has lost its place",
			decide: candidate(holding(with(cand("old", "b", "q", 0, false, -time.Minute, -PlaceGrace))), byB, "n", 30*time.Second, 64),
			err:    ErrHeld, write: true, check: all(candidates("n"), registered("n", 0, 30*time.Second))},
		{contract: "§8 Candidates: a request under the same holder name from another principal registers beside it and changes nothing of it",
			decide: candidate(holding(with(cand("old", "b", "q", 7, true, -time.Minute, time.Minute))), as(byB, func(r *AcquireRequest) { r.Principal = "z" }), "n", 30*time.Second, 64),
			err:    ErrHeld, write: true, check: all(candidates("old", "n"), yieldTo("b"), registered("old", -time.Minute, time.Minute))},
		{contract: "§8 Limits: a newcomer that ranks after every candidate of a full list waits unregistered",
			decide: candidate(full(), as(byB, func(r *AcquireRequest) { r.Priority = 1 }), "n", 30*time.Second, 2), err: ErrHeld},
		{contract: "§8 Limits: one that ranks before the last takes that one's place",
			decide: candidate(full(), as(byB, func(r *AcquireRequest) { r.Priority = 4 }), "n", 30*time.Second, 2), err: ErrHeld, write: true,
			check: candidates("1", "n")},
		{contract: "§8 Candidates: a candidate refused by a reservation for another registers too",
			decide: candidate(holding(releasedAt(time.Second), reserved("c", "r", time.Second)), byB, "n", 30*time.Second, 64), err: ErrReserved, write: true,
			check: candidates("n")},
		{contract: "§8 Candidates: the candidate that gets the lease leaves the list in the same write",
			decide: candidate(holding(ranOut, with(cand("n", "b", "q", 0, false, -time.Minute, time.Minute))), byB, "n", 30*time.Second, 64), write: true,
			check: all(newHolding("b", "q", 5, 5), candidates())},
		{contract: "§8 Liveness of a candidate: a request that ends without the lease removes its registration, one write",
			decide: withdraw(holding(with(cand("n", "b", "q", 0, false, -time.Minute, time.Minute), cand("1", "c", "r", 0, false, -time.Minute, time.Minute))), "n"), write: true,
			check: candidates("1")},
		{contract: "§8 Liveness of a candidate: nothing to remove, no write",
			decide: withdraw(holding(with(cand("1", "c", "r", 0, false, -time.Minute, time.Minute))), "n")},
		{contract: "§8 Liveness of a candidate: a lease that is gone has nothing to remove",
			decide: withdraw(nil, "n")},
	})
}

func TestDecideRenew(t *testing.T) {
	runDecisions(t, []decisionRow{
		{contract: "§3 renew: held by that holder with that token and principal: renewTime = serverTime, expireTime = serverTime + ttl",
			decide: renew(holding(), as(mine, func(r *RenewRequest) { r.TTL = ttl2 }), "", "", t0), write: true,
			check: func(t *testing.T, n *Record) {
				if !n.RenewTime.Equal(t0) || !n.ExpireTime.Equal(t0.Add(ttl2)) || n.TTL != ttl2 || n.FencingToken != 4 || !n.AcquireTime.Equal(t0.Add(-time.Minute)) {
					t.Errorf("renew wrote %+v", n)
				}
			}},
		{contract: "§3 renew: omitted ttlMs keeps the holding's ttl; omitted metadata keeps it",
			decide: renew(holding(), mine, "", "", t0), write: true, check: all(expiresAt(t0.Add(ttl)), metadata(`{"m":1}`))},
		{contract: "§3 renew: given metadata replaces it",
			decide: renew(holding(), mine, `{"n":2}`, "", t0), write: true, check: metadata(`{"n":2}`)},
		{contract: "§8 Checkpoint: the holder writes it with renew, under its token; omitted keeps it",
			decide: renew(holding(), mine, "", `{"c":2}`, t0), write: true, check: checkpoint(`{"c":2}`, 4)},
		{contract: "§3 renew: expired is lease_lost; an expired holding is never revived",
			decide: renew(holding(ranOut), mine, "", "", t0), err: ErrLost},
		{contract: "§3 renew: released is lease_lost",
			decide: renew(holding(releasedAt(time.Second)), mine, "", "", t0), err: ErrLost},
		{contract: "§3 renew: revoked is lease_lost",
			decide: renew(holding(revoked), mine, "", "", t0), err: ErrLost},
		{contract: "§3 renew: other holder is lease_lost",
			decide: renew(holding(), as(mine, func(r *RenewRequest) { r.Holder = "b" }), "", "", t0), err: ErrLost},
		{contract: "§3 renew: other token is lease_lost",
			decide: renew(holding(), as(mine, func(r *RenewRequest) { r.FencingToken = 3 }), "", "", t0), err: ErrLost},
		{contract: "§3 Holder binding: from any other principal the answer is lease_lost",
			decide: renew(holding(), as(mine, func(r *RenewRequest) { r.Principal = "q" }), "", "", t0), err: ErrLost},
		{contract: "§3 renew: absent is lease_lost",
			decide: renew(nil, mine, "", "", t0), err: ErrLost},
		{contract: "§15: a deleted lease is lease_lost to renew",
			decide: renew(tomb(), mine, "", "", t0), err: ErrLost},
		{contract: "§8 Preemption: the holder's renew answer carries yieldTo, the best live preempting candidate of strictly higher priority",
			decide: renew(holding(with(cand("1", "c", "r", 3, true, -time.Second, time.Minute), cand("2", "d", "s", 9, false, -time.Minute, time.Minute), cand("3", "e", "t", 2, true, -time.Minute, time.Minute))), mine, "", "", t0),
			write:  true, check: yieldTo("c")},
		{contract: "§8 Preemption: a preempting candidate of equal priority asks nothing",
			decide: renew(holding(with(cand("3", "e", "t", 2, true, -time.Minute, time.Minute))), mine, "", "", t0), write: true, check: yieldTo("")},
		{contract: "§8 Liveness of a candidate: a wait that ran out ends its registration; a write keeps it only while its place is held (2 s)",
			decide: renew(holding(with(cand("1", "c", "r", 0, false, -time.Minute, -time.Second), cand("2", "d", "s", 0, false, -time.Minute, -PlaceGrace))), mine, "", "", t0),
			write:  true, check: candidates("1")},
		{contract: "§3 Session-held holdings: a renew that does not come through that session is session_held and changes nothing",
			decide: renew(holding(through(key1, 1)), mine, "", "", t0), err: ErrSessionHeld},
		{contract: "§14: a renew through the session at its epoch extends the holding",
			decide: renew(holding(through(key1, 1)), as(mine, func(r *RenewRequest) { r.Session = ref(key1, 1) }), "", "", t0), write: true,
			check: all(expiresAt(t0.Add(ttl)), session(key1, 1))},
		{contract: "§14: a renew through the session at another epoch is lease_lost",
			decide: renew(holding(through(key1, 2)), as(mine, func(r *RenewRequest) { r.Session = ref(key1, 1) }), "", "", t0), err: ErrLost},
		{contract: "§14: a renew through another session is lease_lost",
			decide: renew(holding(through(key1, 1)), as(mine, func(r *RenewRequest) { r.Session = ref(key2, 1) }), "", "", t0), err: ErrLost},
		{contract: "§14: a renew through a session of a plain holding is lease_lost",
			decide: renew(holding(), as(mine, func(r *RenewRequest) { r.Session = ref(key1, 1) }), "", "", t0), err: ErrLost},
		{contract: "§3 Session-held holdings: a session-held holding that ran out is lease_lost to a plain renew, as any",
			decide: renew(holding(through(key1, 1), ranOut), mine, "", "", t0), err: ErrLost},
	})
}

func TestDecideEnd(t *testing.T) {
	runDecisions(t, []decisionRow{
		{contract: "§3 release: while held by that holder and token, acquired by the calling principal, ends the holding now (expireTime = serverTime) and keeps the token",
			decide: end(holding(), release, t0), write: true, ended: true,
			check: func(t *testing.T, n *Record) {
				if !n.ExpireTime.Equal(t0) || n.FencingToken != 4 || !Released(n) || n.ReservedFor != "" {
					t.Errorf("release wrote %+v", n)
				}
			}},
		{contract: "§3 release: repeating it returns the same lease while nobody has acquired since",
			decide: end(holding(releasedAt(time.Second)), release, t0)},
		{contract: "§3 release: releasing one's own holding that already expired succeeds and leaves expireTime as it was",
			decide: end(holding(ranOut), release, t0.Add(time.Second))},
		{contract: "§3 release: a holding that was revoked is lease_lost",
			decide: end(holding(revoked), release, t0), err: ErrLost},
		{contract: "§3 release: another token is lease_lost",
			decide: end(holding(), as(release, func(e *endRequest) { e.token = 5 }), t0), err: ErrLost},
		{contract: "§3 release: another holder (the lease acquired since) is lease_lost",
			decide: end(holding(func(r *Record) { r.Holder = "b" }), release, t0), err: ErrLost},
		{contract: "§3 Holder binding: release from another principal is lease_lost",
			decide: end(holding(), as(release, func(e *endRequest) { e.principal = "q" }), t0), err: ErrLost},
		{contract: "§3 release: absent is lease_lost",
			decide: end(nil, release, t0), err: ErrLost},
		{contract: "§15: a deleted lease is lease_lost to release",
			decide: end(tomb(), release, t0), err: ErrLost},
		{contract: "§8 Checkpoint: the holder writes it with release, under its token",
			decide: end(holding(), as(release, func(e *endRequest) { e.checkpoint = []byte(`{"c":2}`) }), t0), write: true, ended: true,
			check: checkpoint(`{"c":2}`, 4)},
		{contract: "§8 Checkpoint: a release of one's own holding that has already ended, while nobody has acquired since, still writes it (no event)",
			decide: end(holding(ranOut), as(release, func(e *endRequest) { e.checkpoint = []byte(`{"c":2}`) }), t0.Add(time.Second)), write: true,
			check: all(checkpoint(`{"c":2}`, 4), expiresAt(t0))},
		{contract: "§8 Checkpoint: the same checkpoint again on an ended holding writes nothing",
			decide: end(holding(ranOut), as(release, func(e *endRequest) { e.checkpoint = []byte(`{"c":1}`) }), t0)},
		{contract: "§8 Checkpoint: a revoked holding may not write it",
			decide: end(holding(revoked), as(release, func(e *endRequest) { e.checkpoint = []byte(`{"c":2}`) }), t0), err: ErrLost},
		{contract: "§8 Liveness of a candidate: an end keeps the registrations whose place is held and drops the rest",
			decide: end(holding(with(cand("1", "c", "r", 0, false, -time.Minute, time.Minute), cand("2", "d", "s", 0, false, -time.Minute, -PlaceGrace))), release, t0),
			write:  true, ended: true, check: all(candidates("1"), reservedFor(0, "c", t0.Add(ReserveWindow)))},

		// §8 transfer.
		{contract: "§8 Transfer: ends the caller's live holding now, as release does, and reserves the lease for to (and toPrincipal) for reserveMs",
			decide: end(holding(), transfer, t0), write: true, ended: true,
			check: all(expiresAt(t0), reservedFor(0, "b", t0.Add(3*time.Second)), func(t *testing.T, n *Record) {
				if n.ReservedPrincipal != "q" || n.FencingToken != 4 {
					t.Errorf("transfer wrote %+v", n)
				}
			})},
		{contract: "§8 Transfer: with a checkpoint, writes it",
			decide: end(holding(), as(transfer, func(e *endRequest) { e.checkpoint = []byte(`{"c":9}`) }), t0), write: true, ended: true,
			check: checkpoint(`{"c":9}`, 4)},
		{contract: "§8 Reservation 1: a transfer's reservation outlasts the 5 s window of the candidates",
			decide: end(holding(with(cand("1", "c", "r", 9, false, -time.Minute, time.Minute))), as(transfer, func(e *endRequest) { e.reserve = time.Minute }), t0),
			write:  true, ended: true, check: reservedFor(30*time.Second, "b", t0.Add(time.Minute))},
		{contract: "§8 Transfer: repeating the same transfer succeeds and changes nothing while nobody has acquired since",
			decide: end(holding(releasedAt(time.Second), reserved("b", "q", 2*time.Second)), transfer, t0)},
		{contract: "§8 Transfer: a holding already transferred to someone else is lease_lost",
			decide: end(holding(releasedAt(time.Second), reserved("c", "q", 2*time.Second)), transfer, t0), err: ErrLost},
		{contract: "§8 Transfer: a holding transferred to the same holder for another principal is lease_lost",
			decide: end(holding(releasedAt(time.Second), reserved("b", "z", 2*time.Second)), transfer, t0), err: ErrLost},
		{contract: "§8 Transfer: a holding that already ended by release is lease_lost",
			decide: end(holding(releasedAt(time.Second)), transfer, t0), err: ErrLost},
		{contract: "§8 Transfer: a holding that expired is lease_lost",
			decide: end(holding(ranOut), transfer, t0), err: ErrLost},
		{contract: "§8 Transfer: a revoked holding is lease_lost",
			decide: end(holding(revoked), transfer, t0), err: ErrLost},
		{contract: "§8 Transfer: another token is lease_lost",
			decide: end(holding(), as(transfer, func(e *endRequest) { e.token = 3 }), t0), err: ErrLost},
		{contract: "§8 Transfer: like release, the principal that began the holding",
			decide: end(holding(), as(transfer, func(e *endRequest) { e.principal = "q" }), t0), err: ErrLost},
		{contract: "§8 Transfer: a lease that never existed is lease_lost",
			decide: end(nil, transfer, t0), err: ErrLost},

		// §3 session-held holdings (§14).
		{contract: "§3 Session-held holdings: a release of a live one that does not come through its session is session_held",
			decide: end(holding(through(key1, 1)), release, t0), err: ErrSessionHeld},
		{contract: "§3 Session-held holdings: … and a transfer",
			decide: end(holding(through(key1, 1)), transfer, t0), err: ErrSessionHeld},
		{contract: "§3 Session-held holdings: a plain release of one that already ended (its session died) succeeds and changes nothing",
			decide: end(holding(through(key1, 1), ranOut), release, t0)},
		{contract: "§14: a release through the session at its epoch ends it",
			decide: end(holding(through(key1, 1)), as(release, func(e *endRequest) { e.session = ref(key1, 1) }), t0), write: true, ended: true, check: session("", 0)},
		{contract: "§14: a release through the session at another epoch is lease_lost",
			decide: end(holding(through(key1, 2)), as(release, func(e *endRequest) { e.session = ref(key1, 1) }), t0), err: ErrLost},
		{contract: "§14: a transfer through another session is lease_lost",
			decide: end(holding(through(key1, 1)), as(transfer, func(e *endRequest) { e.session = ref(key2, 1) }), t0), err: ErrLost},
		{contract: "§14: a release through a session of a live plain holding is lease_lost",
			decide: end(holding(), as(release, func(e *endRequest) { e.session = ref(key1, 1) }), t0), err: ErrLost},
		{contract: "§3 release: repeating it through the session after the first release cleared the session succeeds and changes nothing",
			decide: end(holding(releasedAt(time.Second)), as(release, func(e *endRequest) { e.session = ref(key1, 1) }), t0)},
		{contract: "§3 Session-held holdings: when the session dies the service releases it (released, reason session_expired), keeping the session for a resume",
			decide: end(holding(through(key1, 1)), as(release, func(e *endRequest) { e.session, e.reason = ref(key1, 1), ReasonSessionExpired }), t0),
			write:  true, ended: true, check: all(expiresAt(t0), session(key1, 1))},
		{contract: "§14: ExpireSession of a holding the session lost (another epoch) is lease_lost",
			decide: end(holding(through(key1, 2)), as(release, func(e *endRequest) { e.session, e.reason = ref(key1, 1), ReasonSessionExpired }), t0), err: ErrLost},
		{contract: "§14: ExpireSession of a holding that already ran out leaves it as it is",
			decide: end(holding(through(key1, 1), ranOut), as(release, func(e *endRequest) { e.session, e.reason = ref(key1, 1), ReasonSessionExpired }), t0)},
	})
}

func TestDecideRevoke(t *testing.T) {
	op := RevokeRequest{Name: "x", Reason: "stuck", Operator: "ops"}
	revokedNow := func(t *testing.T, n *Record) {
		if !n.ExpireTime.Equal(t0) || n.FencingToken != 4 || n.RevokedBy != "ops" || n.RevokeReason != "stuck" || n.Holder != "a" {
			t.Errorf("revoke wrote %+v", n)
		}
	}
	runDecisions(t, []decisionRow{
		{contract: "§3 revoke table: held, no fencingToken given: the lease after it (held false, revokedBy, revokeReason), token kept",
			decide: revoke(holding(), op), write: true, check: revokedNow},
		{contract: "§3 revoke table: held, fencingToken = the live holding's",
			decide: revoke(holding(), as(op, func(r *RevokeRequest) { r.FencingToken = 4 })), write: true, check: revokedNow},
		{contract: "§3 Session-held holdings: a revoke ends it too",
			decide: revoke(holding(through(key1, 1)), op), write: true, check: revokedNow},
		{contract: "§3 revoke table: not held (released), no fencingToken: the lease unchanged, nothing to revoke",
			decide: revoke(holding(releasedAt(time.Second)), op)},
		{contract: "§3 revoke table: not held (expired), no fencingToken: unchanged",
			decide: revoke(holding(ranOut), op)},
		{contract: "§3 revoke table: not held (already revoked), no fencingToken: unchanged",
			decide: revoke(holding(revoked), op)},
		{contract: "§3 revoke table: fencingToken given and another token: lease_lost",
			decide: revoke(holding(), as(op, func(r *RevokeRequest) { r.FencingToken = 3 })), err: ErrLost},
		{contract: "§3 revoke table: fencingToken given and that holding has ended: lease_lost",
			decide: revoke(holding(releasedAt(time.Second)), as(op, func(r *RevokeRequest) { r.FencingToken = 4 })), err: ErrLost},
		{contract: "§3 revoke table: never existed: not_found",
			decide: revoke(nil, op), err: ErrNotFound},
		{contract: "§15: a deleted lease is not_found to revoke",
			decide: revoke(tomb(), op), err: ErrNotFound},
	})
}

// TestDecideAfterRevoke follows §3 revoke: the holder's next renew or
// release is lease_lost, and the next acquire gets fencingToken + 1.
func TestDecideAfterRevoke(t *testing.T) {
	r, err := decideRevoke(holding(), RevokeRequest{Name: "x", Reason: "stuck"}, t0)
	if err != nil || r == nil {
		t.Fatalf("revoke = %v, %v", r, err)
	}
	at := t0.Add(time.Millisecond)
	runDecisions(t, []decisionRow{
		{contract: "§3 revoke: the holder's next renew is lease_lost", decide: renew(r, mine, "", "", at), err: ErrLost},
		{contract: "§3 revoke: the holder's next release is lease_lost", decide: end(r, release, at), err: ErrLost},
		{contract: "§3 revoke: the next acquire gets fencingToken + 1", decide: acquire(r, byB, "", at), write: true,
			check: func(t *testing.T, n *Record) {
				if n.FencingToken != 5 || n.RevokeReason != "" {
					t.Errorf("acquire after revoke wrote %+v", n)
				}
			}},
	})
}

// TestValidateRevokeRow: §3 revoke table: bad or missing reason,
// fencingToken < 1: invalid_argument (the other rows, unknown fields and
// permission_denied, are the HTTP layer's).
func TestValidateRevokeRow(t *testing.T) {
	for _, req := range []RevokeRequest{
		{Name: "x"}, {Name: "x", Reason: "a\x00b"}, {Name: "x", Reason: "ok", FencingToken: -1},
		{Name: "x", Reason: string(make([]rune, MaxReasonLen+1))},
	} {
		if err := ValidateRevoke(req); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateRevoke(%+v) = %v, want invalid_argument", req, err)
		}
	}
}

func TestDecideGet(t *testing.T) {
	runDecisions(t, []decisionRow{
		{contract: "§3 get: returns the lease, held", decide: get(holding()), write: true, check: expiresAt(t0.Add(5 * time.Second))},
		{contract: "§3 get: returns the lease, not held", decide: get(holding(releasedAt(time.Minute))), write: true, check: expiresAt(t0.Add(-time.Minute))},
		{contract: "§3 get: not_found if it never existed", decide: get(nil), err: ErrNotFound},
		{contract: "§15: a deleted lease is not_found to get", decide: get(tomb()), err: ErrNotFound},
	})
}

func TestDecideDelete(t *testing.T) {
	runDecisions(t, []decisionRow{
		{contract: "§15 delete: held (serverTime < expireTime): lease_held, nothing changes",
			decide: del(holding(), 0), err: ErrHeld},
		{contract: "§15 delete: free but reserved for a transfer's successor: lease_reserved",
			decide: del(holding(releasedAt(time.Second), reserved("b", "q", time.Second)), 0), err: ErrReserved},
		{contract: "§15 delete: free but reserved for the best candidate after a holding ended: lease_reserved",
			decide: del(holding(releasedAt(time.Second), with(cand("1", "b", "q", 0, false, -time.Minute, time.Minute))), 0), err: ErrReserved},
		{contract: "§15 delete: never existed: not_found",
			decide: del(nil, 0), err: ErrNotFound},
		{contract: "§15 delete: already deleted: not_found (a delete is not idempotent)",
			decide: del(tomb(), 0), err: ErrNotFound},
		{contract: "§15: what a delete leaves is a tombstone: the name, the last token and transitions, the times of the last holding and of the deletion; no holder, principal, metadata, checkpoint, candidates or reservation",
			decide: del(holding(releasedAt(time.Minute), reserved("b", "q", -time.Second), with(cand("1", "b", "q", 0, false, -time.Minute, -time.Second))), 0), write: true,
			check: func(t *testing.T, n *Record) {
				want := Record{Name: "x", FencingToken: 4, Transitions: 4, TTL: ttl, AcquireTime: t0.Add(-time.Minute),
					RenewTime: t0.Add(-5 * time.Second), ExpireTime: t0.Add(-time.Minute), DeleteTime: t0}
				if n.Name != want.Name || n.FencingToken != want.FencingToken || n.Transitions != want.Transitions || n.TTL != want.TTL ||
					!n.AcquireTime.Equal(want.AcquireTime) || !n.RenewTime.Equal(want.RenewTime) || !n.ExpireTime.Equal(want.ExpireTime) || !n.DeleteTime.Equal(t0) ||
					n.Holder != "" || n.Principal != "" || n.Metadata != nil || n.Checkpoint != nil || n.Candidates != nil || n.ReservedFor != "" || n.Priority != 0 {
					t.Errorf("tombstone %+v, want %+v", n, want)
				}
			}},
		{contract: "§15 Retention: the write checks again, so a lease not free that long stays",
			decide: del(holding(releasedAt(time.Minute)), time.Hour), err: ErrNotIdle},
		{contract: "§15 Retention: a lease free at least that long is deleted",
			decide: del(holding(releasedAt(time.Hour)), time.Hour), write: true, check: func(t *testing.T, n *Record) {
				if !Tombstone(n) {
					t.Errorf("wrote %+v, want a tombstone", n)
				}
			}},
	})
}

func TestDecideTakeOver(t *testing.T) {
	resumed := all(session(key1, 2), expiresAt(t0.Add(ttl2)), func(t *testing.T, n *Record) {
		if n.FencingToken != 4 || !n.RenewTime.Equal(t0) || n.TTL != ttl2 || n.ReservedFor != "" || !n.AcquireTime.Equal(t0.Add(-time.Minute)) {
			t.Errorf("takeover wrote %+v", n)
		}
	})
	runDecisions(t, []decisionRow{
		{contract: "§14 resume: a takeover at a higher epoch moves the live holding to it and extends it by the session lease TTL, same token",
			decide: takeOver(holding(through(key1, 1)), resume), write: true, check: resumed},
		{contract: "§14 resume: of two racing takeovers at one epoch only the first wins: the same epoch is lease_lost",
			decide: takeOver(holding(through(key1, 2)), resume), err: ErrLost},
		{contract: "§14 resume: a lower epoch is lease_lost",
			decide: takeOver(holding(through(key1, 3)), resume), err: ErrLost},
		{contract: "§14 resume: another session's holding is lease_lost",
			decide: takeOver(holding(through(key2, 1)), resume), err: ErrLost},
		{contract: "§14 resume: a plain holding (a plain release cleared the session) is lease_lost",
			decide: takeOver(holding(), resume), err: ErrLost},
		{contract: "§14 resume: another token (acquired since) is lease_lost",
			decide: takeOver(holding(through(key1, 1), func(r *Record) { r.FencingToken = 5 }), resume), err: ErrLost},
		{contract: "§14 resume: another principal is lease_lost",
			decide: takeOver(holding(through(key1, 1)), as(resume, func(r *TakeOverRequest) { r.Principal = "q" })), err: ErrLost},
		{contract: "§14 resume: a holding that ran out while nobody acquired since restarts with the same token",
			decide: takeOver(holding(through(key1, 1), ranOut), resume), write: true, check: resumed},
		{contract: "§14 resume: a holding ended session_expired restarts with the same token",
			decide: takeOver(holding(through(key1, 1), releasedAt(time.Minute)), resume), write: true, check: resumed},
		{contract: "§14 resume: a revoked holding is lease_lost",
			decide: takeOver(holding(through(key1, 1), revoked), resume), err: ErrLost},
		{contract: "§14 resume: a holding that ended while reserved for another (§8 reservation 2) is lease_lost",
			decide: takeOver(holding(through(key1, 1), releasedAt(time.Second), with(cand("1", "b", "q", 0, false, -time.Minute, time.Minute))), resume), err: ErrLost},
		{contract: "§14 resume: a reservation for the holder itself does not stop the restart, and is cleared",
			decide: takeOver(holding(through(key1, 1), releasedAt(time.Second), with(cand("1", "a", "p", 0, false, -time.Minute, time.Minute))), resume), write: true,
			check: all(resumed, candidates())},
		{contract: "§14 resume: a deleted lease is lease_lost",
			decide: takeOver(tombstone(holding(through(key1, 1), releasedAt(time.Minute)), t0.Add(-time.Second)), resume), err: ErrLost},
		{contract: "§14 resume: a lease that never existed is lease_lost",
			decide: takeOver(nil, resume), err: ErrLost},
	})
}

// runDecisions runs each row as a subtest named by its contract line.
func runDecisions(t *testing.T, rows []decisionRow) {
	t.Helper()
	for _, row := range rows {
		t.Run(row.contract, func(t *testing.T) {
			got := row.decide()
			switch {
			case row.err == nil && got.err != nil:
				t.Fatalf("refused: %v", got.err)
			case row.err != nil && !errors.Is(got.err, row.err):
				t.Fatalf("answered %v, want %v", got.err, row.err)
			case (got.next != nil) != row.write:
				t.Fatalf("wrote %+v, want a write: %v", got.next, row.write)
			case got.ended != row.ended:
				t.Fatalf("ended = %v, want %v", got.ended, row.ended)
			}
			if got.next != nil && row.check != nil {
				row.check(t, got.next)
			}
		})
	}
}
