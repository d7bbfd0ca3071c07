package httpapi

import (
	"time"

	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
)

// A `refresh` event's data is {"leases":[refreshLease, …]} (docs/contract.md
// §10): the leases whose holding the stream has told and whose time left or
// succession changed since it last told them.

// refreshLease is one lease in a refresh event: its holding and succession
// members as the instance's last read of it showed them, and remainingMs as
// of the moment the event is sent (the read's remaining time less the time
// since, on this instance's monotonic clock). Whatever the dashboard shows
// of a holding beside its time left belongs here and in refreshKey, such as
// a session-held holding's `session` and `sessionWindowMs` (docs/contract.md
// §14): its remainingMs is then the backend's long session lease TTL, which
// the owning instance renews, not how soon the holding ends if its agent
// stops (one window after its last heartbeat).
type refreshLease struct {
	Name                  string `json:"name"`
	FencingToken          int64  `json:"fencingToken"`
	Holder                string `json:"holder"`
	Held                  bool   `json:"held"`
	RemainingMs           int64  `json:"remainingMs"`
	TTLMs                 int64  `json:"ttlMs"`
	Priority              int    `json:"priority,omitempty"`
	ReservedFor           string `json:"reservedFor,omitempty"`
	ReservedUntil         string `json:"reservedUntil,omitempty"`
	YieldRequested        bool   `json:"yieldRequested,omitempty"`
	YieldTo               string `json:"yieldTo,omitempty"`
	Candidates            int    `json:"candidates,omitempty"`
	BestCandidatePriority *int   `json:"bestCandidatePriority,omitempty"`
	Session               bool   `json:"session,omitempty"`
	SessionWindowMs       int64  `json:"sessionWindowMs,omitempty"`
}

func refreshOf(e refreshed, now time.Time) refreshLease {
	k := e.key
	out := refreshLease{Name: e.l.Name, FencingToken: k.token, Holder: k.holder, Held: k.held, TTLMs: k.ttl.Milliseconds(),
		Priority: k.priority, ReservedFor: k.reservedFor, YieldTo: k.yieldTo, YieldRequested: k.yieldTo != "", Candidates: k.candidates}
	if k.held {
		out.RemainingMs = max(e.l.Remaining()-now.Sub(e.at), 0).Milliseconds()
	}
	if k.reservedFor != "" {
		out.ReservedUntil = wire.FormatTime(k.reservedUntil)
	}
	if k.bestCandidate >= 0 {
		p := k.bestCandidate
		out.BestCandidatePriority = &p
	}
	if k.session {
		out.Session, out.SessionWindowMs = true, k.sessionWindow.Milliseconds()
	}
	return out
}

// refresh takes the leases a scan found changed. A lease whose state (its
// holding, or the holding's end) is newer than what the stream told waits
// for the events that lead to it, as a held snapshot (ReorderWait); one
// whose holding the stream told, but whose expiry or succession moved,
// goes into one `refresh` event with the others.
func (p *prefixStream) refresh(items []refreshed, now time.Time) {
	var out []refreshLease
	for _, e := range items {
		n := e.l.Name
		if !p.readable(n) {
			continue
		}
		st := stateEvent(e.l)
		last, ok := p.last[n]
		if !ok || lease.Newer(last, st) {
			l := e.l
			p.hold(heldItem{ev: st, snap: &l, at: e.at}, now)
			continue
		}
		if lease.Newer(st, last) || keyOf(last.Lease) == e.key {
			continue // the stream told a newer state, or this one already
		}
		p.last[n] = mark(lease.Event{Type: last.Type, Lease: e.l})
		out = append(out, refreshOf(e, now))
	}
	var batch []byte
	flush := func() {
		if len(batch) > 0 {
			p.s.write(frame("", "refresh", append(append([]byte(`{"leases":[`), batch...), "]}"...)))
			batch = batch[:0]
		}
	}
	for _, l := range out {
		b, err := wire.Marshal(l)
		if err != nil {
			p.s.fail(err)
			return
		}
		if len(batch)+len(b) > refreshBytes {
			flush()
		}
		if len(batch) > 0 {
			batch = append(batch, ',')
		}
		batch = append(batch, b...)
	}
	flush()
}

// refreshBytes bounds the leases of one refresh event (its data line):
// more go into further events, so that no line grows past what line-based
// SSE readers take (Go's bufio.Scanner: 64 KiB). A lease is about 130
// bytes with short names, at most about 800.
const refreshBytes = 32 << 10
