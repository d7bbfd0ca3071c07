package history

import (
	"bytes"
	"encoding/json"
	"math"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// cpWrite is a checkpoint write: a renew, release or transfer that sent a
// checkpoint and was acknowledged or went unanswered (a lease_lost one
// wrote nothing).
type cpWrite struct {
	e      *Entry
	acked  bool
	server time.Time // the answer's serverTime (acked only)
}

// checkSuccession runs the checks of docs/contract.md §8 on the entries
// of one lease, whose holdings hs the other checks gathered:
//   - no stale checkpoint: a checkpoint write is acknowledged only while no
//     later holding has begun, by server time (a holding with a higher token
//     acquired before the write's serverTime) or by real time (an acquire
//     of a higher token answered before the write was sent);
//   - no lost checkpoint: an acquire answer (and the final read) carries a
//     checkpoint that some write of its checkpointToken sent, of an earlier
//     or the same holding, and not older than the last acknowledged
//     checkpoint write of an earlier holding decided at or before the
//     acquisition;
//   - no refused release: a release of the caller's own holding, which
//     the record still was before and after it, is not answered lease_lost;
//   - no broken reservation: the holding after one that a transfer ended,
//     if it began while the transfer's reservation was in force, is the
//     successor's; and the successor is not refused lease_reserved for
//     another in that window.
func checkSuccession(res *Result, name string, es []Entry, hs map[int64]*holding, final *lease.Lease) {
	var writes []cpWrite
	for i := range es {
		e := &es[i]
		if e.Checkpoint == nil || (e.Op != Renew && e.Op != Release && e.Op != Transfer) {
			continue
		}
		switch {
		case e.Outcome == OK && e.Lease != nil:
			writes = append(writes, cpWrite{e: e, acked: true, server: e.Lease.ServerTime})
		case e.Outcome == Maybe:
			writes = append(writes, cpWrite{e: e})
		}
	}
	checkStaleCheckpoints(res, name, es, hs, writes)
	for i := range es {
		e := &es[i]
		if e.Op == Acquire && e.Outcome == OK && e.Lease != nil {
			checkInherited(res, name, describe(*e), e.Lease, e.Lease.FencingToken, e.Lease.AcquireTime, writes)
		}
	}
	if final != nil {
		checkInherited(res, name, "the final read", final, math.MaxInt64, final.ServerTime, writes)
	}
	checkReservations(res, name, es, hs)
	checkRefusedReleases(res, name, es)
}

// checkRefusedReleases reports a release answered lease_lost although the
// holding it named was the caller's before the release was sent (its
// acquire had answered it) and still the lease's after the release was
// answered (an answer sent later shows it, not revoked): the record was
// that holding all along, and a release of one's own holding, live or
// ended, always succeeds (docs/contract.md §3).
func checkRefusedReleases(res *Result, name string, es []Entry) {
	for _, r := range es {
		if r.Op != Release || r.Outcome != Lost {
			continue
		}
		owned := false
		for _, a := range es {
			if a.Op == Acquire && a.Outcome == OK && a.Holder == r.Holder && a.Lease.FencingToken == r.Token && a.Return.Before(r.Call) {
				owned = true
				break
			}
		}
		if !owned {
			continue
		}
		for _, e := range es {
			if e.Lease != nil && e.Call.After(r.Return) && e.Lease.FencingToken == r.Token && e.Lease.Holder == r.Holder && e.Lease.RevokeReason == "" {
				res.add(name, e.Lease.ServerTime, "%s was answered lease_lost, but the holding was the caller's before (its acquire answered) and still the lease's after (%s, sent after that answer, shows it)",
					describe(r), describe(e))
				break
			}
		}
	}
}

// checkStaleCheckpoints reports acknowledged checkpoint writes of a holding
// that a later one had already replaced.
func checkStaleCheckpoints(res *Result, name string, es []Entry, hs map[int64]*holding, writes []cpWrite) {
	for _, w := range writes {
		if !w.acked {
			continue
		}
		e := w.e
		for t, h := range hs {
			if t > e.Token && h.acquire.Before(w.server) {
				res.add(name, w.server, "%s was acknowledged at server time %s, but token %d (%q) had begun at %s (shown by %s): a checkpoint from a stale holding",
					describe(*e), fmtTime(w.server), t, h.holder, fmtTime(h.acquire), h.where)
				break
			}
		}
		for _, a := range es {
			if a.Op == Acquire && a.Outcome == OK && a.Lease != nil && a.Lease.FencingToken > e.Token && a.Return.Before(e.Call) {
				res.add(name, w.server, "%s was acknowledged, but %s had answered token %d before it was sent: a checkpoint from a stale holding",
					describe(*e), describe(a), a.Lease.FencingToken)
				break
			}
		}
	}
}

// checkInherited checks the checkpoint that l, an acquire answer of token
// (or the final read) showing the holding acquired at server time at,
// carries against the checkpoint writes.
func checkInherited(res *Result, name, where string, l *lease.Lease, token int64, at time.Time, writes []cpWrite) {
	if l.Checkpoint != nil {
		if l.CheckpointToken < 1 || l.CheckpointToken > token {
			res.add(name, l.ServerTime, "%s shows checkpoint %s with checkpointToken %d, not a token up to its own %d", where, l.Checkpoint, l.CheckpointToken, token)
			return
		}
		written := false
		for _, w := range writes {
			if w.e.Token == l.CheckpointToken && sameJSON(w.e.Checkpoint, l.Checkpoint) {
				written = true
				break
			}
		}
		if !written {
			res.add(name, l.ServerTime, "%s shows checkpoint %s with checkpointToken %d, which no write of that holding sent", where, l.Checkpoint, l.CheckpointToken)
			return
		}
	}
	// The last acknowledged write of an earlier holding decided by then.
	var last *cpWrite
	for i := range writes {
		w := &writes[i]
		if !w.acked || w.e.Token >= token || w.server.After(at) {
			continue
		}
		if last == nil || w.e.Token > last.e.Token || (w.e.Token == last.e.Token && w.server.After(last.server)) {
			last = w
		}
	}
	if last == nil {
		return
	}
	lost := func() {
		cp, cpt := "none", int64(0)
		if l.Checkpoint != nil {
			cp, cpt = string(l.Checkpoint), l.CheckpointToken
		}
		res.add(name, at, "%s shows checkpoint %s (token %d), but %s had been acknowledged at server time %s: an acknowledged checkpoint was lost",
			where, cp, cpt, describe(*last.e), fmtTime(last.server))
	}
	switch {
	case l.Checkpoint == nil || l.CheckpointToken < last.e.Token:
		lost()
	case l.CheckpointToken == last.e.Token:
		// That write, a later acknowledged one of the same holding, or one
		// that went unanswered (it may have landed at any time).
		for _, w := range writes {
			if w.e.Token == last.e.Token && sameJSON(w.e.Checkpoint, l.Checkpoint) &&
				(!w.acked || !w.server.Before(last.server)) {
				return
			}
		}
		lost()
	}
}

// checkReservations checks that the reservation of every acknowledged
// transfer held while it was in force.
func checkReservations(res *Result, name string, es []Entry, hs map[int64]*holding) {
	for i := range es {
		t := &es[i]
		if t.Op != Transfer || t.Outcome != OK || t.Lease == nil || t.Lease.ReservedFor != t.To {
			continue
		}
		from, until := t.Lease.ExpireTime, t.Lease.ReservedUntil
		if next, ok := hs[t.Token+1]; ok && next.holder != t.To && !next.acquire.Before(from) && next.acquire.Before(until) {
			res.add(name, next.acquire, "token %d acquired by %q at %s (shown by %s), but %s had reserved the lease for %q until %s: a broken reservation",
				next.token, next.holder, fmtTime(next.acquire), next.where, describe(*t), t.To, fmtTime(until))
		}
		for _, e := range es {
			if e.Op == Acquire && e.Outcome == Reserved && e.Holder == t.To && e.Lease != nil && e.Lease.FencingToken == t.Token &&
				e.Lease.ReservedFor != t.To && !e.Lease.ServerTime.Before(from) && e.Lease.ServerTime.Before(until) {
				res.add(name, e.Lease.ServerTime, "%s was refused lease_reserved for %q at %s, but %s had reserved the lease for it until %s: a broken reservation",
					describe(e), e.Lease.ReservedFor, fmtTime(e.Lease.ServerTime), describe(*t), fmtTime(until))
			}
		}
	}
}

// sameJSON reports whether a and b are the same JSON value, whatever their
// spacing and member order.
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, err1 := json.Marshal(x)
	ya, err2 := json.Marshal(y)
	return err1 == nil && err2 == nil && bytes.Equal(xa, ya)
}
