package sessionsim

import (
	"context"
	"slices"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// Live returns the ids of the connections that still carry something, in
// order.
func (w *World) Live() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for _, c := range w.conns {
		if c.live() {
			out = append(out, c.ID)
		}
	}
	return out
}

// Current returns the id of the connection on which a last sent open or
// resume, or -1.
func (w *World) Current(a *Agent) int {
	w.check.mu.Lock()
	defer w.check.mu.Unlock()
	if c := a.Spec.current; c != nil {
		return c.ID
	}
	return -1
}

// InstanceOf returns the instance that connection id reaches.
func (w *World) InstanceOf(id int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conns[id].Inst.K
}

// Cut breaks connection id: both ends fail, and what was not read is lost.
func (w *World) Cut(id int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.conns[id].cut()
}

// Drop closes connection id as its agent would when it gives up on it.
func (w *World) Drop(id int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.conns[id].drop()
}

// pipe returns a direction of connection id; w.mu held.
func (w *World) pipe(id int, up bool) *pipe {
	if up {
		return w.conns[id].up
	}
	return w.conns[id].down
}

// Hold makes the frames of one direction of connection id wait.
func (w *World) Hold(id int, up bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pipe(id, up).held = true
	w.logf("conn %d: frames %s held", id, dirName(up))
}

// Release delivers the frames held on one direction of connection id, in
// order, and lets the next ones pass.
func (w *World) Release(id int, up bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pp := w.pipe(id, up)
	pp.held = false
	pp.deliver()
	w.logf("conn %d: frames %s released", id, dirName(up))
}

// Held returns the ids of the connections with frames waiting in the
// direction up, in order.
func (w *World) Held(up bool) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for _, c := range w.conns {
		if pp := w.pipe(c.ID, up); pp.held && !pp.reset && slices.ContainsFunc(pp.queue, func(u unit) bool { return u.frame }) {
			out = append(out, c.ID)
		}
	}
	return out
}

// Holding returns the ids of the connections whose direction up is held.
func (w *World) Holding(up bool) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for _, c := range w.conns {
		if w.pipe(c.ID, up).held {
			out = append(out, c.ID)
		}
	}
	return out
}

// frames returns the indexes in the queue of pp of its frames; w.mu held.
func frames(pp *pipe) []int {
	var out []int
	for i, u := range pp.queue {
		if u.frame {
			out = append(out, i)
		}
	}
	return out
}

// Frames returns how many frames wait in one direction of connection id.
func (w *World) Frames(id int, up bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(frames(w.pipe(id, up)))
}

// DropFrame loses the i-th frame waiting from the agent on connection id
// (the frames after it still arrive: a lost message).
func (w *World) DropFrame(id, i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pp := w.pipe(id, true)
	j := frames(pp)[i]
	w.logf("conn %d: frame %s dropped", id, describeUnit(pp.queue[j]))
	pp.queue = slices.Delete(pp.queue, j, j+1)
}

// DupFrame duplicates the i-th frame waiting in one direction of
// connection id, the copy right after it.
func (w *World) DupFrame(id int, up bool, i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pp := w.pipe(id, up)
	j := frames(pp)[i]
	w.logf("conn %d: frame %s duplicated", id, describeUnit(pp.queue[j]))
	pp.queue = slices.Insert(pp.queue, j+1, pp.queue[j])
}

// SwapFrames swaps the i-th and (i+1)-th frames waiting from the agent on
// connection id.
func (w *World) SwapFrames(id, i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pp := w.pipe(id, true)
	f := frames(pp)
	a, b := f[i], f[i+1]
	w.logf("conn %d: frames %s and %s swapped", id, describeUnit(pp.queue[a]), describeUnit(pp.queue[b]))
	pp.queue[a], pp.queue[b] = pp.queue[b], pp.queue[a]
}

func describeUnit(u unit) string {
	if u.msg == nil {
		return "(control)"
	}
	return "[" + describe(u.msg) + "]"
}

func dirName(up bool) string {
	if up {
		return "to the instance"
	}
	return "to the agent"
}

// Candidate starts another holder's acquire of name, waiting up to wait,
// for ttl; once it holds, it releases after hold.
func (w *World) Candidate(holder, name string, wait, ttl, hold time.Duration) {
	w.logf("candidate %s: acquire %s waiting %v", holder, name, wait)
	w.Go(func(ctx context.Context) {
		l, err := w.M.Acquire(ctx, lease.AcquireRequest{Name: name, Holder: holder, TTL: ttl, Wait: wait})
		if err != nil {
			w.logf("candidate %s: %s not acquired: %v", holder, name, err)
			return
		}
		w.logf("candidate %s: holds %s token %d", holder, name, l.FencingToken)
		select {
		case <-ctx.Done():
			return
		case <-time.After(hold):
		}
		if _, err := w.M.Release(ctx, lease.ReleaseRequest{Name: name, Holder: holder, FencingToken: l.FencingToken}); err == nil {
			w.logf("candidate %s: released %s", holder, name)
		}
	})
}

// Contend starts holder contending for name until the world closes: it
// waits for the lease (up to a minute), holds it for hold, releases it,
// and pauses for rest.
func (w *World) Contend(holder, name string, ttl, hold, rest time.Duration) {
	w.Go(func(ctx context.Context) {
		for ctx.Err() == nil {
			l, err := w.M.Acquire(ctx, lease.AcquireRequest{Name: name, Holder: holder, TTL: ttl, Wait: time.Minute})
			if err == nil {
				w.logf("contender %s: holds %s token %d", holder, name, l.FencingToken)
				if !sleep(ctx, hold) {
					return
				}
				_, _ = w.M.Release(ctx, lease.ReleaseRequest{Name: name, Holder: holder, FencingToken: l.FencingToken})
			}
			if !sleep(ctx, rest) {
				return
			}
		}
	})
}

// sleep waits d, or until ctx is done (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
