package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// watch streams a lease as Server-Sent Events: first `event: lease` with
// the lease now (data null if it never existed), then one event per change
// (`acquired`, `released`, `expired`, with the docs/contract.md §5 event JSON and the
// ce-id as SSE id), and a comment every heartbeat. Changes come from the
// events hub; a timer at the holding's expiry reads the lease again, so a
// change nobody announced (events off) is still seen, late by at most the
// time the read takes. A stream resumed with Last-Event-ID first replays
// the kept events after that one (replayLease).
func (a *api) watch(w http.ResponseWriter, r *http.Request, name string) {
	if !lease.ValidName(name) {
		a.fail(w, r, problem{status: http.StatusBadRequest, code: codeInvalidArgument, detail: "the request has invalid fields",
			violations: []lease.FieldViolation{{Field: "name", Description: "must be 1–128 characters of [A-Za-z0-9._-] starting with a letter or digit"}}})
		return
	}
	release, ok := a.admitStream(w, r)
	if !ok {
		return
	}
	defer release()
	acct := a.account(r) // the subscription and the queue (docs/contract.md §16)
	defer acct.Close()
	sub := a.cfg.Events.Subscribe(name) // before the read, so no change falls between
	defer a.cfg.Events.Unsubscribe(sub)
	if cost := subscriptionCost(cap(sub.C)) + heldRequestCost(r); !acct.Grow(cost) {
		a.fail(w, r, a.memoryProblem(acct.Refusal()))
		return
	}
	ctx := r.Context()
	cur, found, err := a.read(ctx, name)
	if err != nil {
		a.fail(w, r, a.errorProblem(r, err))
		return
	}
	a.observeOp(r, "ok")
	if !startEventStream(w, r) {
		return
	}
	s := a.openStream(w, r, acct)
	defer s.close()
	s.backlog = true // the replay and the state go at the client's pace
	a.replayLease(s, r, name)
	s.snapshot(cur, found)
	s.backlog = false

	var last lease.Event // the newest state the client has, as an event
	backstop := time.NewTimer(time.Hour)
	backstop.Stop()
	defer backstop.Stop()
	arm := func(l lease.Lease) {
		if l.Held() {
			backstop.Reset(max(l.Remaining(), time.Millisecond))
		}
	}
	if found {
		last = stateEvent(cur)
		arm(cur)
	}
	heartbeat, stopTimers := a.streamTimers()
	defer stopTimers()
	for s.ok() {
		select {
		case <-s.ctx.Done(): // the client went, shutdown, or the lifetime ended
			return
		case <-s.done: // a write failed, or the client fell behind
			return
		case <-heartbeat:
			s.write([]byte(": heartbeat\n\n"))
		case ev := <-sub.C:
			if sub.Lagged() { // events were dropped: say the state anew
				cur, found, err = a.read(ctx, name)
				if err != nil {
					return
				}
				s.backlog = true
				s.snapshot(cur, found)
				s.backlog = false
				last = stateEvent(cur)
				arm(cur)
				continue
			}
			if last.Lease.Name != "" && !lease.Newer(last, ev) {
				continue // a duplicate or an older event
			}
			s.event(ev)
			last = ev
			arm(ev.Lease)
		case <-backstop.C:
			cur, found, err = a.read(ctx, name)
			if err != nil || !found {
				continue
			}
			for _, ev := range missed(last, cur) {
				s.event(ev)
				last = ev
			}
			arm(cur)
		}
	}
}

// read gets the lease; found is false when it never existed.
func (a *api) read(ctx context.Context, name string) (l lease.Lease, found bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	l, err = a.m.Get(rctx, name)
	if errors.Is(err, lease.ErrNotFound) {
		return lease.Lease{}, false, nil
	}
	return l, err == nil, err
}

// stateEvent is the event that brought the lease to its state l.
func stateEvent(l lease.Lease) lease.Event {
	switch {
	case l.Held():
		return lease.Event{Type: lease.EventAcquired, Lease: l, Time: l.AcquireTime}
	case l.Revoked():
		return lease.Event{Type: lease.EventRevoked, Lease: l, Time: l.ExpireTime, Reason: l.RevokeReason, Operator: l.RevokedBy}
	case l.Released():
		return lease.Event{Type: lease.EventReleased, Lease: l, Time: l.ExpireTime}
	}
	return lease.Event{Type: lease.EventExpired, Lease: l, Time: l.ExpireTime}
}

// missed returns the events that lead from last to the state cur, as far
// as a read can tell them: a new holding, and its end if it already ended.
func missed(last lease.Event, cur lease.Lease) []lease.Event {
	var out []lease.Event
	if last.Lease.Name == "" || cur.FencingToken > last.Lease.FencingToken {
		acq := lease.Event{Type: lease.EventAcquired, Lease: cur, Time: cur.AcquireTime}
		out = append(out, acq)
		last = acq
	}
	if end := stateEvent(cur); lease.Newer(last, end) {
		out = append(out, end)
	}
	return out
}

func (s *stream) snapshot(l lease.Lease, found bool) {
	if !found {
		s.write(frame("", "lease", []byte("null")))
		return
	}
	s.write(leaseFrame("", "lease", l))
}

func (s *stream) event(ev lease.Event) {
	f, err := eventFrame(ev.ID(), string(ev.Type), ev)
	if err != nil {
		s.fail(err)
		return
	}
	s.write(f)
}

// frame renders one SSE event; data is one line of JSON.
// It has the capacity it needs and no more: a stream's queue holds frames.
func frame(id, event string, data []byte) []byte {
	b := make([]byte, 0, len("id: \nevent: \ndata: \n\n")+len(id)+len(event)+len(data))
	if id != "" {
		b = append(append(append(b, "id: "...), id...), '\n')
	}
	b = append(append(append(b, "event: "...), event...), "\ndata: "...)
	return append(append(b, data...), "\n\n"...)
}

// admitStream takes one of the caller's and the instance's :watch stream
// slots (docs/contract.md §9), or answers 429 (503 while shutting down) and
// reports false. The caller must call release when its stream ends.
func (a *api) admitStream(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	if a.stopCtx.Err() != nil {
		a.fail(w, r, shuttingDown())
		return nil, false
	}
	if a.refuseNew(w, r, "watch") {
		return nil, false
	}
	release, ok = a.streams.take(a.callerKey(r))
	if !ok {
		a.fail(w, r, exhausted(":watch streams", 5))
	}
	return release, ok
}

// startEventStream answers 200 with the headers of a Server-Sent Events
// stream, and reports whether events should follow (not for HEAD).
func startEventStream(w http.ResponseWriter, r *http.Request) bool {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return r.Method != http.MethodHead
}

// streamTimers returns a stream's heartbeat ticks and the function that
// stops them. The stream's lifetime (docs/contract.md §9) is its context's
// (openStream).
func (a *api) streamTimers() (heartbeat <-chan time.Time, stop func()) {
	hb := time.NewTicker(a.cfg.Heartbeat)
	return hb.C, hb.Stop
}
