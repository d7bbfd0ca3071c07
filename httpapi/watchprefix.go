package httpapi

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/lease"
)

// The prefix stream's constants (docs/contract.md §10).
const (
	// ResumeLookback is how far before a resumed stream's Last-Event-ID
	// (backend time) the recent events are replayed: it covers events that
	// reached this instance late (Pub/Sub delivery, the sweeper's second).
	ResumeLookback = time.Minute
	// ReorderWait is how long a prefix stream holds back an event whose
	// predecessor (made on another instance) has not arrived yet — an
	// acquired event before the release of the holding before it, a
	// release before its acquire — so that every lease's events go out in
	// token order.
	ReorderWait = 2 * time.Second
)

// watchPrefix streams every change of holding of the leases under a prefix
// as Server-Sent Events (docs/contract.md §10): a `snapshot` event per
// readable lease, then (with history=true) a `history` event per recent
// event this instance keeps, then each change as it comes (`acquired`,
// `released`, `expired`, `revoked`, `deleted`, with the §5 event JSON), and a comment
// every heartbeat. Each event's id is a cursor in backend time (Unix
// milliseconds); a request with Last-Event-ID replays the kept events from
// ResumeLookback before the cursor and then the snapshot of every lease
// whose state is newer than what was replayed (for a lease the replay
// covered, only once the events between have not come within ReorderWait).
// With refresh=true the stream also carries `refresh` events: the time
// left and succession of the leases whose holding it told, as this
// instance's paced re-read of the prefix finds them changed (renewals are
// not events), and a snapshot of a state no event brought (refresh.go).
func (a *api) watchPrefix(w http.ResponseWriter, r *http.Request) {
	if !a.admit(w, r, "watch", "") {
		return
	}
	q, p := checkQuery(r, "prefix", "history", "refresh")
	if p != nil {
		a.fail(w, r, *p)
		return
	}
	var bad []lease.FieldViolation
	prefix := q.Get("prefix")
	if len(q["prefix"]) > 1 || (prefix != "" && !lease.ValidName(prefix)) {
		bad = append(bad, lease.FieldViolation{Field: "prefix", Description: "must be given at most once and be the start of a lease name: [A-Za-z0-9._-], starting with a letter or digit"})
	}
	history := false
	if h := q["history"]; len(h) > 0 {
		b, err := strconv.ParseBool(h[0])
		if err != nil || len(h) > 1 {
			bad = append(bad, lease.FieldViolation{Field: "history", Description: "must be true or false, once"})
		}
		history = b
	}
	refresh := false
	if h := q["refresh"]; len(h) > 0 {
		b, err := strconv.ParseBool(h[0])
		if err != nil || len(h) > 1 {
			bad = append(bad, lease.FieldViolation{Field: "refresh", Description: "must be true or false, once"})
		}
		refresh = b
	}
	var cursor int64
	resume := false
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || n < 0 {
			bad = append(bad, lease.FieldViolation{Field: "Last-Event-ID", Description: "must be an id this stream sent (Unix milliseconds)"})
		}
		cursor, resume = n, true
	}
	if len(bad) > 0 {
		slices.SortFunc(bad, func(x, y lease.FieldViolation) int { return strings.Compare(x.Field, y.Field) })
		a.fail(w, r, problem{status: http.StatusBadRequest, code: codeInvalidArgument, detail: "the request has invalid fields", violations: bad})
		return
	}
	principal := principalOf(r)
	filter := false
	if p := a.cfg.Policy; p != nil {
		all, some := p.ListScope(principal, auth.Read, prefix)
		if !all && !some {
			a.deny(w, r, "watch", principal, prefix, auth.Read)
			return
		}
		filter = !all
	}
	readable := func(name string) bool {
		return (!filter || a.cfg.Policy.Allowed(principal, auth.Read, name)) && !a.internal(name)
	}
	release, ok := a.admitStream(w, r)
	if !ok {
		return
	}
	defer release()
	// The stream's subscription, its queue and the snapshot's chunk are
	// charged to the memory budget (docs/contract.md §16); what it cannot
	// hold at the start is a 429 or 503, later an overflow event.
	acct := a.account(r)
	defer acct.Close()
	if cost := subscriptionCost(prefixStreamEvents) + heldRequestCost(r); !acct.Grow(cost) {
		a.fail(w, r, a.memoryProblem(acct.Refusal()))
		return
	}

	sub, recent := a.cfg.Events.SubscribePrefixBuffer(prefix, prefixStreamEvents) // before the list, so no change falls between
	if !resume && !history {
		recent = nil // not kept while the snapshot waits for a slow client
	}
	defer a.cfg.Events.Unsubscribe(sub)
	var rsub *refreshSub
	var refreshed <-chan struct{} // nil without refresh: never ready
	if refresh {
		var ok bool
		if rsub, ok = a.refresh.subscribe(prefix); !ok {
			a.fail(w, r, exhausted("refreshed prefixes", 5))
			return
		}
		if rsub != nil {
			defer rsub.close()
			refreshed = rsub.C
		}
	}
	ls := a.newLister(r, lease.ListRequest{Prefix: prefix}, -1, a.streamChunk(), acct)
	defer ls.close()
	first, err := ls.next()
	if err != nil {
		var me *memoryError
		if errors.As(err, &me) {
			a.fail(w, r, a.memoryProblem(me.refusal))
			return
		}
		a.fail(w, r, a.errorProblem(r, err))
		return
	}
	a.observeOp(r, "ok")
	if !startEventStream(w, r) {
		return
	}
	s := a.openStream(w, r, acct)
	defer s.close()
	s.backlog = true // the replay, the snapshot and the history go at the client's pace
	ps := &prefixStream{s: s, last: map[string]lease.Event{},
		held: map[string]*heldBack{}, cursor: cursor, readable: readable}
	if resume {
		// The kept events of the window, each lease's in token order (they
		// reached this instance in arrival order); the first of each lease
		// goes out as it is, since the client had what came before.
		from := time.UnixMilli(cursor).Add(-ResumeLookback)
		replay := slices.DeleteFunc(slices.Clone(recent), func(ev lease.Event) bool { return ev.Time.Before(from) })
		slices.SortStableFunc(replay, func(x, y lease.Event) int {
			if c := strings.Compare(x.Lease.Name, y.Lease.Name); c != 0 {
				return c
			}
			if lease.Newer(x, y) {
				return -1
			}
			if lease.Newer(y, x) {
				return 1
			}
			return 0
		})
		ps.replaying = true
		for _, ev := range replay {
			ps.offer(ev, time.Now())
		}
		ps.replaying = false
	}
	err = eachReadable(s, ls, first, readable, func(l lease.Lease) {
		_, replayed := ps.last[l.Name]
		if ps.held[l.Name] != nil || replayed {
			// What the replay lacks may still be on its way to this
			// instance: the state waits behind it, as a held event.
			ps.hold(heldItem{ev: stateEvent(l), snap: &l}, time.Now())
			return
		}
		ps.snapshot(l)
	})
	ls.close() // the snapshot's last chunk is not kept
	if err != nil {
		return // the client reconnects
	}
	if history && !resume {
		for _, ev := range recent {
			if readable(ev.Lease.Name) {
				ps.history(ev)
			}
		}
	}
	ps.s.write([]byte(": live\n\n"))
	s.backlog = false

	heartbeat, stopTimers := a.streamTimers()
	defer stopTimers()
	hold := time.NewTimer(time.Hour)
	hold.Stop()
	defer hold.Stop()
	if d, ok := ps.nextDeadline(); ok {
		hold.Reset(max(time.Until(d), time.Millisecond))
	}
	for s.ok() {
		select {
		case <-s.ctx.Done(): // the client went, shutdown, or the lifetime ended
			return
		case <-s.done: // a write failed, or the client fell behind
			return
		case <-heartbeat:
			ps.s.write([]byte(": heartbeat\n\n"))
		case ev := <-sub.C:
			if sub.Lagged() { // events were dropped: say the states anew
				ls := a.newLister(r, lease.ListRequest{Prefix: prefix}, -1, a.streamChunk(), acct)
				first, err := ls.next()
				if err != nil {
					var me *memoryError
					if errors.As(err, &me) {
						s.failMemory(me.need)
					}
					return
				}
				s.backlog = true
				ps.flushAll(time.Time{})
				seen := map[string]bool{}
				err = eachReadable(s, ls, first, readable, func(l lease.Lease) { seen[l.Name] = true; ps.snapshot(l) })
				ls.close()
				if err != nil {
					return
				}
				ps.gone(seen)
				s.backlog = false
			}
			ps.offer(ev, time.Now())
		case <-hold.C:
			ps.flushAll(time.Now())
		case <-refreshed:
			ps.refresh(rsub.take(), time.Now())
		}
		if d, ok := ps.nextDeadline(); ok {
			hold.Reset(max(time.Until(d), time.Millisecond))
		}
	}
}

// prefixStream is the state of one prefix stream: the newest event sent per
// lease, and the events held back until their predecessor's end arrives.
type prefixStream struct {
	s        *stream
	last     map[string]lease.Event
	held     map[string]*heldBack
	cursor   int64 // the newest backend time sent, Unix ms: the events' id
	readable func(string) bool
	// replaying is set while a resume replays kept events: a lease's first
	// one needs no predecessor.
	replaying bool
}

// mark is what a prefix stream remembers of the newest event it sent of
// a lease: what lease.Newer and ready compare, what a refresh compares
// (keyOf) and what a deleted event found by a re-list says, without the
// lease's metadata and checkpoint, so that a stream over many large leases
// does not keep a copy of each.
func mark(ev lease.Event) lease.Event {
	l := ev.Lease
	l.Metadata, l.Checkpoint = nil, nil
	return lease.Event{Type: ev.Type, Lease: l}
}

// heldBack is a lease's events waiting, in Newer order, for the events
// before them, until deadline.
type heldBack struct {
	evs      []heldItem
	deadline time.Time
}

// heldItem is a held event, or (snap set) the lease's state from a list,
// ranked as the event that led to it, to be sent as a snapshot if no event
// reaches it by the deadline.
type heldItem struct {
	ev   lease.Event
	snap *lease.Lease
	// at, when set, is the local time the snapshot was read (a refresh
	// scan): it goes out with serverTime moved on by the time since, so
	// that its remainingMs is the time left when it is sent.
	at time.Time
}

// offer sends ev now, or holds it back (with what follows it) while its
// predecessor's end may still arrive, or drops it when it is not newer than
// what was sent.
func (p *prefixStream) offer(ev lease.Event, now time.Time) {
	n := ev.Lease.Name
	if !p.readable(n) {
		return
	}
	if last, ok := p.last[n]; ok && !lease.Newer(last, ev) {
		return
	}
	if p.held[n] == nil && p.ready(ev) {
		p.send(ev)
		return
	}
	p.hold(heldItem{ev: ev}, now)
}

// hold queues it behind lease's held events (an event replaces a state
// that ranks the same) and sends what is ready.
func (p *prefixStream) hold(it heldItem, now time.Time) {
	n := it.ev.Lease.Name
	if last, ok := p.last[n]; ok && !lease.Newer(last, it.ev) {
		return
	}
	hb := p.held[n]
	if hb == nil {
		hb = &heldBack{deadline: now.Add(ReorderWait)}
		p.held[n] = hb
	}
	i, found := slices.BinarySearchFunc(hb.evs, it, func(x, y heldItem) int {
		switch {
		case !lease.Newer(x.ev, y.ev) && !lease.Newer(y.ev, x.ev):
			return 0
		case lease.Newer(x.ev, y.ev):
			return -1
		}
		return 1
	})
	switch {
	case !found:
		hb.evs = slices.Insert(hb.evs, i, it)
	case hb.evs[i].snap != nil && it.snap == nil:
		hb.evs[i] = it
	}
	p.flush(n, now)
}

// ready says whether ev may go out now: when it is the next event of its
// lease after the last one sent — the first acquire of a new lease, the end of the holding last acquired, or
// the acquire of the holding after the one that ended (or after one that
// ran out, whose end nobody may announce). Anything else waits for the
// events between (from another instance, through Pub/Sub) until its
// deadline.
func (p *prefixStream) ready(ev lease.Event) bool {
	last, ok := p.last[ev.Lease.Name]
	if !ok { // a lease that did not exist when the stream listed them
		// A first holding has no previous holder: token 1, or the first
		// after a deletion (docs/contract.md §15).
		return p.replaying || (ev.Type == lease.EventAcquired && ev.PreviousHolder == "")
	}
	k := last.Lease.FencingToken
	if ev.Type == lease.EventDeleted { // follows the end of the last holding
		return last.Type != lease.EventAcquired && ev.Lease.FencingToken == k
	}
	if last.Type == lease.EventAcquired {
		if ev.Type != lease.EventAcquired {
			return ev.Lease.FencingToken == k
		}
		return ev.Lease.FencingToken == k+1 && ev.PreviousExpired
	}
	return ev.Type == lease.EventAcquired && ev.Lease.FencingToken == k+1
}

// flush sends the held events of lease n that are ready, or all of them
// once the deadline passed (now zero: the caller knows nothing more comes).
func (p *prefixStream) flush(n string, now time.Time) {
	hb := p.held[n]
	if hb == nil {
		return
	}
	late := now.IsZero() || !now.Before(hb.deadline)
	for len(hb.evs) > 0 {
		it := hb.evs[0]
		if last, ok := p.last[n]; ok && !lease.Newer(last, it.ev) {
			hb.evs = hb.evs[1:]
			continue
		}
		if !late && (it.snap != nil || !p.ready(it.ev)) {
			return
		}
		if it.snap != nil {
			l := *it.snap
			if !it.at.IsZero() {
				l.ServerTime = l.ServerTime.Add(max(time.Since(it.at), 0))
			}
			p.snapshot(l)
		} else {
			p.send(it.ev)
		}
		hb.evs = hb.evs[1:]
	}
	delete(p.held, n)
}

// flushAll flushes every lease; see flush.
func (p *prefixStream) flushAll(now time.Time) {
	for n := range p.held {
		p.flush(n, now)
	}
}

// nextDeadline is the earliest deadline of the held-back events.
func (p *prefixStream) nextDeadline() (time.Time, bool) {
	var d time.Time
	for _, hb := range p.held {
		if d.IsZero() || hb.deadline.Before(d) {
			d = hb.deadline
		}
	}
	return d, !d.IsZero()
}

func (p *prefixStream) advance(t time.Time) string {
	p.cursor = max(p.cursor, t.UnixMilli())
	return strconv.FormatInt(p.cursor, 10)
}

func (p *prefixStream) send(ev lease.Event) {
	f, err := eventFrame(p.advance(ev.Time), string(ev.Type), ev)
	if err != nil {
		p.s.fail(err)
		return
	}
	if !p.remember(ev.Lease.Name, mark(ev)) {
		return
	}
	p.s.write(f)
}

// snapshot sends the lease as it is, unless the stream already sent its
// state or a newer one.
func (p *prefixStream) snapshot(l lease.Lease) {
	st := stateEvent(l)
	if last, ok := p.last[l.Name]; ok && !lease.Newer(last, st) {
		return
	}
	if !p.remember(l.Name, mark(st)) {
		return
	}
	p.s.write(leaseFrame(p.advance(l.ServerTime), "snapshot", l))
}

// gone sends a deleted event for each lease the stream showed that is not
// listed any more: after events were dropped, a deletion is seen only
// as the lease's absence from the list (docs/contract.md §15).
func (p *prefixStream) gone(listed map[string]bool) {
	for n, last := range p.last {
		if listed[n] || last.Type == lease.EventDeleted {
			continue
		}
		l := last.Lease
		p.send(lease.Event{Type: lease.EventDeleted, Lease: l, Time: l.ServerTime})
	}
}

// history sends a kept event as it was, outside the order of the stream.
func (p *prefixStream) history(ev lease.Event) {
	f, err := eventFrame("", "history", ev)
	if err != nil {
		p.s.fail(err)
		return
	}
	p.s.write(f)
}
