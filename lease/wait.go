package lease

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// waiter is one acquire waiting for a lease. wake has room for one signal so
// a wake-up is never lost and never blocks the waker.
type waiter struct {
	wake   chan struct{}
	holder string
	rank   int // the candidate's priority; -1 for a waiter that is no candidate
	picked bool
}

// waitQueues holds, per lease name, the acquires waiting on this instance:
// candidates by priority (highest first), then everyone in arrival order.
// Only the head competes for the lease when it is woken; the next one
// becomes head when it leaves. A waiter named by a reservation is picked:
// it competes once even when it is not the head.
type waitQueues struct {
	mu sync.Mutex
	q  map[string][]*waiter
}

func (w *waitQueues) enqueue(name, holder string, rank int) (*waiter, bool) {
	me := &waiter{wake: make(chan struct{}, 1), holder: holder, rank: rank}
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.q[name]
	i := len(q)
	for i > 0 && q[i-1].rank < rank {
		i--
	}
	q = slices.Insert(q, i, me)
	w.q[name] = q
	return me, i == 0
}

// remove takes me out of the queue and, if it was the head, wakes the next.
func (w *waitQueues) remove(name string, me *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.q[name]
	for i, x := range q {
		if x != me {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		if len(q) == 0 {
			delete(w.q, name)
			return
		}
		w.q[name] = q
		if i == 0 {
			signal(q[0])
		}
		return
	}
}

// pick wakes the waiters of name acquiring as holder and lets them compete
// even when they are not the head.
func (w *waitQueues) pick(name, holder string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.q[name] {
		if x.holder == holder {
			x.picked = true
			signal(x)
		}
	}
}

// shouldTry reports whether me competes now (it is the head, or it was
// picked since it last tried) and clears its pick.
func (w *waitQueues) shouldTry(name string, me *waiter) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.q[name]
	try := me.picked || len(q) > 0 && q[0] == me
	me.picked = false
	return try
}

// wakeHead wakes the first waiter of name, if any.
func (w *waitQueues) wakeHead(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.q[name]; len(q) > 0 {
		signal(q[0])
	}
}

// waiting returns how many acquires wait on this instance, all leases together.
func (w *waitQueues) waiting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, q := range w.q {
		n += len(q)
	}
	return n
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Wake tells the Manager that the lease name may have changed (for example,
// an event from another instance said it was released), so the first acquire
// waiting for it here tries again now.
func (m *Manager) Wake(name string) { m.waiters.wakeHead(name) }

// Waiting returns how many acquires are waiting on this Manager.
func (m *Manager) Waiting() int { return m.waiters.waiting() }

// acquireWaiting tries to acquire, and while the lease is held by another
// (or reserved for another), waits for a wake-up (a local release or
// acquire, or Wake) or for the holding's expiry, until req.Wait runs out or
// ctx is done. The expiry timer only schedules the next attempt; the
// backend's clock still decides. A candidate (req.Candidate) registers in
// the lease on its first attempt, whether it is the head or not, so every
// instance sees it. When it stops waiting without the lease it unregisters,
// unless its wait ran out: then its registration ends by itself at that
// moment and keeps its place in line for PlaceGrace.
func (m *Manager) acquireWaiting(ctx context.Context, req AcquireRequest, md []byte) (l Lease, err error) {
	reg := newRegistration(req)
	rank := -1
	if reg != nil {
		rank = req.Priority
	}
	me, head := m.waiters.enqueue(req.Name, req.Holder, rank)
	defer m.waiters.remove(req.Name, me)
	ranOut := false
	if reg != nil {
		defer func() {
			if err != nil && !ranOut { // one that ran out ends by itself, keeping its place a while
				m.unregister(ctx, req.Name, reg.id)
			}
		}()
	}
	deadline := time.NewTimer(req.Wait)
	defer deadline.Stop()
	backstop := time.NewTimer(time.Hour)
	backstop.Stop()
	defer backstop.Stop()

	for first := true; ; first = false {
		if head || first && reg != nil {
			if !first { // woken: the holding may have ended
				m.loop.ExpectWrite(req.Name)
			}
			l, err := m.acquireOnce(ctx, req, md, reg)
			var held *HeldError
			var reserved *ReservedError
			switch {
			case errors.As(err, &held):
				next := max(held.Lease.Remaining(), time.Millisecond)
				if reg != nil {
					// Look in on the holding often enough to take up a
					// reservation made by an end no event announced here.
					next = min(next, candidatePoll)
				}
				backstop.Reset(next)
			case errors.As(err, &reserved):
				// Let the chosen one know if it waits here; look again
				// within a second in case it stops waiting elsewhere.
				if reserved.ReservedFor != req.Holder {
					m.waiters.pick(req.Name, reserved.ReservedFor)
				}
				backstop.Reset(min(max(reserved.Until.Sub(reserved.Lease.ServerTime), time.Millisecond), reservedPoll))
			default:
				return l, err
			}
		}
		if m.cfg.OnWait != nil {
			m.cfg.OnWait(req.Name, req.Holder)
		}
		select {
		case <-me.wake:
		case <-backstop.C:
		case <-deadline.C: // a last attempt answers with the current lease
			ranOut = true
			return m.acquireOnce(ctx, req, md, reg)
		case <-ctx.Done():
			return Lease{}, ctx.Err()
		}
		head = m.waiters.shouldTry(req.Name, me)
	}
}

// reservedPoll is how often a waiter refused by a reservation for another
// looks again, so that a reservation whose candidate stopped waiting on
// another instance moves on within it.
const reservedPoll = time.Second

// candidatePoll is how often the first candidate waiting on an instance
// looks at a held lease: within ReserveWindow, so that it takes up a
// reservation for it even when no event tells its instance that the
// holding ended (a release on another instance without Pub/Sub).
const candidatePoll = ReserveWindow - time.Second

// unregisterTimeout bounds the write that takes a candidate out of the
// lease when its wait ends without the lease.
const unregisterTimeout = 2 * time.Second

// unregister takes the candidate registration id out of the lease name,
// even when ctx is already done (its client went away), and wakes the
// local waiters in case the lease was reserved for it. A failure is left
// to the registration's own deadline.
func (m *Manager) unregister(ctx context.Context, name, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unregisterTimeout)
	defer cancel()
	wrote := false
	_, err := m.loop.Update(ctx, name, func(s Snapshot) (*Record, error) {
		next := decideWithdraw(s.Record, id, decisionTime(s))
		wrote = next != nil
		return next, nil
	})
	if err == nil && wrote {
		m.Wake(name)
	}
}
