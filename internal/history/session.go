package history

import (
	"fmt"
	"time"
)

// sessionHolders returns the holders that sent an operation through a
// session (Entry.Session).
func sessionHolders(es []Entry) map[string]bool {
	out := map[string]bool{}
	for _, e := range es {
		if e.Session && e.Holder != "" {
			out[e.Holder] = true
		}
	}
	return out
}

// sameHolding reports whether a and b show one holding: the same holder,
// token, acquire time and transitions (its times may differ).
func sameHolding(a, b record) bool {
	return a.holder == b.holder && a.token == b.token && a.acquire.Equal(b.acquire) && a.transitions == b.transitions
}

// checkTerms tests every term a session agent led (Led entries) against the
// holdings: no holding after the term's token may begin before the term's
// end of validity. The term ends by the agent's clock and the holding
// begins by the backend's: the check needs the two on one clock (a local
// backend or emulator), as the safety runs have.
func checkTerms(res *Result, name string, hs map[int64]*holding, tokens []int64, terms []Entry) {
	for _, t := range terms {
		for _, tok := range tokens {
			if tok <= t.Token {
				continue
			}
			next := hs[tok]
			if next.acquire.Before(t.Return) {
				res.add(name, next.acquire, "holdings overlap: %q led token %d until %s by its own deadline (a session agent's term), but token %d (%q) began at %s (shown by %s)",
					t.Holder, t.Token, fmtTime(t.Return), next.token, next.holder, fmtTime(next.acquire), next.where)
			}
			break // later tokens began later still (checked above)
		}
	}
}

// sessionShows reports whether a read may show r from the known record
// cur of a session holder: the instance renewed, took over, ended or
// restarted the holding since, unseen, so any later write of the same
// holding may show.
func sessionShows(cur, r record) bool {
	return cur.session && sameHolding(cur, r) && !r.lastWrite().Before(cur.lastWrite())
}

// sessionApply reports whether an acknowledged operation in, answered
// out, may follow the known record cur of a session holder, given the
// writes its instance makes unseen: the holder's own renew, release or
// transfer of the holding at any later decision, or another acquire once
// the instance may have ended the holding (at any time after its last
// write).
func sessionApply(cur record, in input, out output) bool {
	if !cur.session || out.server.Before(cur.lastWrite()) {
		return false
	}
	r := out.rec
	switch in.op {
	case Renew:
		return in.holder == cur.holder && in.token == cur.token && sameHolding(cur, r) &&
			r.renew.Equal(out.server) && r.expire.Equal(out.server.Add(r.ttl))
	case Release, Transfer:
		return in.holder == cur.holder && in.token == cur.token && sameHolding(cur, r) &&
			!out.server.Before(r.expire) && !r.lastWrite().Before(cur.lastWrite())
	case Acquire:
		ended := cur
		if out.server.Before(ended.expire) {
			ended.expire = out.server
		}
		got, ok := apply(&ended, in, out.server)
		return ok && recEqual(got, r)
	}
	return false
}

// describeTerm names a Led entry in messages.
func describeTerm(e Entry) string {
	return fmt.Sprintf("client %d led token %d as %q from %s until %s", e.Client, e.Token, e.Holder,
		e.Call.UTC().Format("15:04:05.000000"), e.Return.UTC().Format(time.TimeOnly+".000000"))
}

// sessionRenewedAcquire reports whether an acknowledged acquire of a
// session holder, answered out, is one that its instance wrote twice: the
// acquire, decided at out.rec.acquire, then the renewal that S5 asks for
// when the acquire's answer came back too late (docs/contract.md §14),
// decided at out.server. It returns the state the acquire made, which the
// instance's unseen renewal then extends (sessionShows lets later reads
// show the renewal): reads between the two writes show that state.
func sessionRenewedAcquire(cur *record, in input, out output) (record, bool) {
	r := out.rec
	if in.op != Acquire || !r.session || r.holder != in.holder || !r.acquire.Before(r.renew) || !r.renew.Equal(out.server) {
		return record{}, false
	}
	first := r
	first.renew, first.expire = r.acquire, r.acquire.Add(r.ttl)
	got, ok := apply(cur, in, r.acquire)
	return first, ok && recEqual(got, first)
}
