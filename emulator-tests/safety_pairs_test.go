package emulatortests

import (
	"fmt"
	"slices"
	"time"

	"github.com/leasesvc/leasesvc/internal/history"
)

// The all-pairs check of a safety run's history, beside history.Check
// (which compares each holding, and each session agent's term, with the
// next token observed): here every holding and every term of a lease is
// compared with every holding and term of another token of that lease, so
// that an overlap stays visible whatever the tokens observed between them.
// With tokens a < b of one lease:
//
//   - no answer or event may show a live at a server time after b began
//     (its acquireTime);
//   - no term of a (an agent's Led entry, up to its own deadline) may end
//     after b began: the agent's clock against the backend's, on one
//     machine in the safety runs (the Spanner emulator's commit timestamps
//     run up to tens of milliseconds ahead of it, which only makes this
//     laxer);
//   - no term of a may end after a term of b began (both on the test's
//     clock): two agents never lead at once.
//
// (A term of b against an answer that shows a live is the first rule: the
// term began after b's acquire answer, whose acquireTime is b's start on
// the backend's clock.)

// pairHolding is what a run's answers show of one holding.
type pairHolding struct {
	token     int64
	holder    string
	acquire   time.Time // its acquireTime
	live      time.Time // the latest server time at which it was shown live
	liveWhere string    // the answer or event that showed it then
	seenLive  bool
}

// pairsResult is what checkAllPairs found.
type pairsResult struct {
	// holdings, terms and pairs count what was compared.
	holdings, terms, pairs int
	// violations are the first history.MaxViolations broken pairs; count is
	// how many there were.
	violations []history.Violation
	count      int
}

func (r *pairsResult) add(name string, at time.Time, format string, args ...any) {
	r.count++
	if len(r.violations) < history.MaxViolations {
		r.violations = append(r.violations, history.Violation{Lease: name, At: at, Msg: fmt.Sprintf(format, args...)})
	}
}

// checkAllPairs runs the all-pairs check on entries: answers, events and
// final reads as observations (Entry.Lease), and Led entries as terms.
func checkAllPairs(entries []history.Entry) pairsResult {
	var res pairsResult
	holdings := map[string]map[int64]*pairHolding{}
	terms := map[string][]history.Entry{}
	for _, e := range entries {
		if e.Op == history.Led {
			if e.Return.After(e.Call) {
				terms[e.Name] = append(terms[e.Name], e)
			}
			continue
		}
		l := e.Lease
		if l == nil || l.FencingToken == 0 {
			continue
		}
		hs := holdings[l.Name]
		if hs == nil {
			hs = map[int64]*pairHolding{}
			holdings[l.Name] = hs
		}
		h := hs[l.FencingToken]
		if h == nil {
			h = &pairHolding{token: l.FencingToken, holder: l.Holder, acquire: l.AcquireTime}
			hs[l.FencingToken] = h
		}
		if l.ServerTime.Before(l.ExpireTime) && (!h.seenLive || l.ServerTime.After(h.live)) {
			h.live, h.liveWhere, h.seenLive = l.ServerTime, pairWhere(e), true
		}
	}
	names := make([]string, 0, len(holdings))
	for n := range holdings {
		names = append(names, n)
	}
	for n := range terms {
		if holdings[n] == nil {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		res.checkLease(name, holdings[name], terms[name])
	}
	return res
}

// checkLease compares every pair of one lease.
func (r *pairsResult) checkLease(name string, hs map[int64]*pairHolding, terms []history.Entry) {
	list := make([]*pairHolding, 0, len(hs))
	for _, h := range hs {
		list = append(list, h)
	}
	slices.SortFunc(list, func(a, b *pairHolding) int { return int(a.token - b.token) })
	slices.SortFunc(terms, func(a, b history.Entry) int { return a.Call.Compare(b.Call) })
	r.holdings += len(list)
	r.terms += len(terms)
	for i, a := range list {
		for _, b := range list[i+1:] {
			r.pairs++
			if a.seenLive && a.live.After(b.acquire) {
				r.add(name, b.acquire, "holdings overlap: token %d (%q) shown live at server time %s (by %s), after token %d (%q) began at %s",
					a.token, a.holder, pairClock(a.live), a.liveWhere, b.token, b.holder, pairClock(b.acquire))
			}
		}
	}
	for _, t := range terms {
		for _, h := range list {
			r.pairs++
			if h.token > t.Token && h.acquire.Before(t.Return) {
				r.add(name, h.acquire, "holdings overlap: %q led token %d until %s by its own deadline (a term from %s), but token %d (%q) began at %s",
					t.Holder, t.Token, pairClock(t.Return), pairClock(t.Call), h.token, h.holder, pairClock(h.acquire))
			}
		}
		for _, u := range terms {
			r.pairs++
			if t.Token < u.Token && t.Return.After(u.Call) {
				r.add(name, u.Call, "two leaders at once: %q led token %d until %s by its own deadline, and %q led token %d from %s",
					t.Holder, t.Token, pairClock(t.Return), u.Holder, u.Token, pairClock(u.Call))
			}
		}
	}
}

// pairWhere names the entry that showed a holding.
func pairWhere(e history.Entry) string {
	switch e.Client {
	case -1:
		return "the final read"
	case -2:
		return "an event"
	}
	return fmt.Sprintf("%s by client %d (%s, %s)", e.Op, e.Client, e.Outcome, e.Note)
}

func pairClock(t time.Time) string { return t.UTC().Format("15:04:05.000000") }
