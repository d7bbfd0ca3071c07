package lease

import (
	"context"
	"errors"
	"sync"
	"time"
)

// waiter is one acquire waiting for a lease. wake has room for one signal so
// a wake-up is never lost and never blocks the waker.
type waiter struct{ wake chan struct{} }

// waitQueues holds, per lease name, the acquires waiting on this instance in
// arrival order. Only the head competes for the lease; the next one becomes
// head when it leaves.
type waitQueues struct {
	mu sync.Mutex
	q  map[string][]*waiter
}

func (w *waitQueues) enqueue(name string) (*waiter, bool) {
	me := &waiter{wake: make(chan struct{}, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.q[name] = append(w.q[name], me)
	return me, len(w.q[name]) == 1
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

func (w *waitQueues) isHead(name string, me *waiter) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.q[name]
	return len(q) > 0 && q[0] == me
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

// acquireWaiting tries to acquire, and while the lease is held by another,
// waits for a wake-up (a local release or acquire, or Wake) or for the
// holding's expiry, until req.Wait runs out or ctx is done. The expiry timer
// only schedules the next attempt; the backend's clock still decides.
func (m *Manager) acquireWaiting(ctx context.Context, req AcquireRequest, md []byte) (Lease, error) {
	me, head := m.waiters.enqueue(req.Name)
	defer m.waiters.remove(req.Name, me)
	deadline := time.NewTimer(req.Wait)
	defer deadline.Stop()
	backstop := time.NewTimer(time.Hour)
	backstop.Stop()
	defer backstop.Stop()

	for first := true; ; first = false {
		if head {
			if !first { // woken: the holding may have ended
				m.loop.ExpectWrite(req.Name)
			}
			l, err := m.acquireOnce(ctx, req, md)
			var held *HeldError
			if !errors.As(err, &held) {
				return l, err
			}
			backstop.Reset(max(held.Lease.Remaining(), time.Millisecond))
		}
		select {
		case <-me.wake:
		case <-backstop.C:
		case <-deadline.C: // a last attempt answers with the current lease
			return m.acquireOnce(ctx, req, md)
		case <-ctx.Done():
			return Lease{}, ctx.Err()
		}
		head = m.waiters.isHead(req.Name, me)
	}
}
