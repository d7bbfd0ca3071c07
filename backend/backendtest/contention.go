package backendtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// holding is one holding of the contended lease as its holder saw it.
type holding struct {
	holder      string
	token       int64
	acquireTime time.Time
	expireTime  time.Time // as finally extended (or cut short by release)
}

// history records every holding, keyed by fencing token.
type history struct {
	mu       sync.Mutex
	holdings map[int64]*holding
	ops      int
}

// saw records a successful acquire, renew or release answer.
func (h *history) saw(l lease.Lease) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops++
	cur, ok := h.holdings[l.FencingToken]
	if !ok {
		h.holdings[l.FencingToken] = &holding{holder: l.Holder, token: l.FencingToken, acquireTime: l.AcquireTime, expireTime: l.ExpireTime}
		return nil
	}
	if cur.holder != l.Holder || !cur.acquireTime.Equal(l.AcquireTime) {
		return fmt.Errorf("token %d reused: held by %s from %v and by %s from %v", l.FencingToken, cur.holder, cur.acquireTime, l.Holder, l.AcquireTime)
	}
	cur.expireTime = l.ExpireTime // each holder is sequential: the last answer is the last write
	return nil
}

// count returns how many holdings have been seen.
func (h *history) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.holdings)
}

// check verifies that tokens run 1..n without gaps, that acquire times never
// go back as tokens grow and that no holding overlaps the next.
func (h *history) check() error {
	var hs []*holding
	for _, x := range h.holdings {
		hs = append(hs, x)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].token < hs[j].token })
	for i, x := range hs {
		if x.token != int64(i+1) {
			return fmt.Errorf("tokens are not 1..%d without gaps: position %d has token %d", len(hs), i, x.token)
		}
		if i == 0 {
			continue
		}
		prev := hs[i-1]
		if x.acquireTime.Before(prev.acquireTime) {
			return fmt.Errorf("token %d acquired at %v, before token %d at %v", x.token, x.acquireTime, prev.token, prev.acquireTime)
		}
		if x.acquireTime.Before(prev.expireTime) {
			return fmt.Errorf("holdings overlap: token %d (%s) runs to %v but token %d (%s) began at %v",
				prev.token, prev.holder, prev.expireTime, x.token, x.holder, x.acquireTime)
		}
	}
	return nil
}

// testContention runs many contenders against one lease: each acquires,
// renews a few times, then releases or abandons the holding to expire. Every
// answer is recorded and the history checked for overlaps and token order.
func (s *suite) testContention(t *testing.T, e *env) {
	m, err := lease.NewManager(e.Store, lease.Config{MinTTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	const ttl = 200 * time.Millisecond
	name := e.name("contended")
	// The run lasts ContentionDuration, longer (up to 5×) until it has seen
	// a hand-over, so that a slow machine still tests one.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	h := &history{holdings: map[int64]*holding{}}
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if e.Advance != nil { // a hand-moved clock: let backend time run 5× real time
				e.Advance(5 * time.Millisecond)
			}
			ran := time.Since(start)
			if ran >= 5*s.opts.ContentionDuration || ran >= s.opts.ContentionDuration && h.count() >= 2 {
				cancel()
				return
			}
		}
	})
	errs := make(chan error, s.opts.Contenders)
	for i := range s.opts.Contenders {
		wg.Go(func() {
			if err := contend(ctx, m, h, name, fmt.Sprintf("c%02d", i), ttl); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := h.check(); err != nil {
		t.Fatal(err)
	}
	ran := time.Since(start).Round(time.Millisecond)
	if len(h.holdings) < 2 {
		t.Fatalf("only %d holdings in %v: the test exercised no hand-over", len(h.holdings), ran)
	}
	t.Logf("%d contenders: %d holdings, %d successful operations in %v", s.opts.Contenders, len(h.holdings), h.ops, ran)
}

// contend is one contender's loop; it returns the first unexpected error.
func contend(ctx context.Context, m *lease.Manager, h *history, name, holder string, ttl time.Duration) error {
	stopped := func(err error) bool { return ctx.Err() != nil && errors.Is(err, ctx.Err()) }
	for ctx.Err() == nil {
		l, err := m.Acquire(ctx, lease.AcquireRequest{Name: name, Holder: holder, TTL: ttl})
		switch {
		case errors.Is(err, lease.ErrHeld):
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			continue
		case stopped(err):
			return nil
		case err != nil:
			return fmt.Errorf("%s: acquire: %w", holder, err)
		}
		if err := h.saw(l); err != nil {
			return err
		}
		for range rand.IntN(4) {
			r, err := m.Renew(ctx, lease.RenewRequest{Name: name, Holder: holder, FencingToken: l.FencingToken})
			if errors.Is(err, lease.ErrLost) || stopped(err) {
				break
			}
			if err != nil {
				return fmt.Errorf("%s: renew: %w", holder, err)
			}
			if err := h.saw(r); err != nil {
				return err
			}
		}
		if rand.IntN(2) == 0 { // release; otherwise abandon the holding to expire
			r, err := m.Release(ctx, lease.ReleaseRequest{Name: name, Holder: holder, FencingToken: l.FencingToken})
			switch {
			case err == nil:
				if err := h.saw(r); err != nil {
					return err
				}
			case errors.Is(err, lease.ErrLost), stopped(err):
			default:
				return fmt.Errorf("%s: release: %w", holder, err)
			}
		}
	}
	return nil
}
