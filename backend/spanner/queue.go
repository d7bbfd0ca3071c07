package spanner

import (
	"context"
	"sync"
)

// nameQueue lets one read-write transaction per lease name run at a time in
// this process. Transactions on one row serialize in Spanner anyway (the
// second waits for the first's lock or is aborted and retried), so queueing
// them here costs no throughput and spares the aborts; the emulator, which
// runs one read-write transaction at a time and fails the one a newcomer
// interrupts, needs it to make progress at all under contention. Other
// processes still race, and Update's retries handle that.
type nameQueue struct {
	mu    sync.Mutex
	slots map[string]*slot
}

// slot is the turn of one name: a token in ch means taken.
type slot struct {
	ch   chan struct{}
	refs int // goroutines holding or waiting for the slot
}

// acquire waits for the turn of name, or until ctx is done (returning
// ctx.Err()). The caller must call the returned release exactly once.
func (q *nameQueue) acquire(ctx context.Context, name string) (release func(), err error) {
	q.mu.Lock()
	if q.slots == nil {
		q.slots = map[string]*slot{}
	}
	s := q.slots[name]
	if s == nil {
		s = &slot{ch: make(chan struct{}, 1)}
		q.slots[name] = s
	}
	s.refs++
	q.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch; q.drop(name, s) }, nil
	case <-ctx.Done():
		q.drop(name, s)
		return nil, ctx.Err()
	}
}

// drop forgets s once nobody holds or waits for it.
func (q *nameQueue) drop(name string, s *slot) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if s.refs--; s.refs == 0 {
		delete(q.slots, name)
	}
}
