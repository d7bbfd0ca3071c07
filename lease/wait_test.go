package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
)

func newManager(t *testing.T) *lease.Manager {
	t.Helper()
	m, err := lease.NewManager(memory.New(), lease.Config{MinTTL: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustAcquire(t *testing.T, m *lease.Manager, req lease.AcquireRequest) lease.Lease {
	t.Helper()
	l, err := m.Acquire(t.Context(), req)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", req, err)
	}
	return l
}

func TestWaitingAcquireIsWokenByRelease(t *testing.T) {
	synctest.Test(t, waitingAcquireIsWokenByRelease)
}

// waitingAcquireIsWokenByRelease is TestWaitingAcquireIsWokenByRelease's body, run in a synctest bubble: fake time.
func waitingAcquireIsWokenByRelease(t *testing.T) {
	m := newManager(t)
	a := mustAcquire(t, m, lease.AcquireRequest{Name: "w", Holder: "a", TTL: time.Minute})
	got := make(chan lease.Lease, 1)
	go func() {
		l, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: "w", Holder: "b", TTL: time.Second, Wait: 30 * time.Second})
		if err != nil {
			t.Errorf("waiting acquire: %v", err)
		}
		got <- l
	}()
	waitFor(t, func() bool { return m.Waiting() == 1 })
	start := time.Now()
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: "w", Holder: "a", FencingToken: a.FencingToken}); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l.Holder != "b" || l.FencingToken != 2 {
		t.Fatalf("waiter got %+v, want b with token 2", l)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("waiter took %v after the release; it should be woken at once", d)
	}
}

func TestWaitingAcquireTakesOverAtExpiry(t *testing.T) {
	m := newManager(t)
	a := mustAcquire(t, m, lease.AcquireRequest{Name: "x", Holder: "a", TTL: 300 * time.Millisecond})
	l, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: "x", Holder: "b", TTL: time.Second, Wait: 10 * time.Second})
	if err != nil {
		t.Fatalf("waiting acquire: %v", err)
	}
	if l.FencingToken != 2 || l.AcquireTime.Before(a.ExpireTime) {
		t.Fatalf("took over %+v, want token 2 no earlier than a's expiry %v", l, a.ExpireTime)
	}
}

func TestWaitRunsOutWithTheCurrentLease(t *testing.T) {
	m := newManager(t)
	mustAcquire(t, m, lease.AcquireRequest{Name: "y", Holder: "a", TTL: time.Minute})
	start := time.Now()
	_, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: "y", Holder: "b", TTL: time.Second, Wait: 200 * time.Millisecond})
	var held *lease.HeldError
	if !errors.As(err, &held) || held.Lease.Holder != "a" {
		t.Fatalf("wait ran out with %v, want *HeldError naming a", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("returned after %v, before the wait ran out", d)
	}
	if m.Waiting() != 0 {
		t.Fatalf("%d waiters left behind", m.Waiting())
	}
}

func TestWaitStopsWhenTheCallerGoesAway(t *testing.T) {
	m := newManager(t)
	mustAcquire(t, m, lease.AcquireRequest{Name: "z", Holder: "a", TTL: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := m.Acquire(ctx, lease.AcquireRequest{Name: "z", Holder: "b", TTL: time.Second, Wait: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire = %v, want the context's error", err)
	}
	if m.Waiting() != 0 {
		t.Fatalf("%d waiters left behind", m.Waiting())
	}
}

// TestWaitersAreServedInArrivalOrder queues three waiters; each release
// hands the lease to the next in the order they arrived.
func TestWaitersAreServedInArrivalOrder(t *testing.T) {
	synctest.Test(t, waitersAreServedInArrivalOrder)
}

// waitersAreServedInArrivalOrder is TestWaitersAreServedInArrivalOrder's body, run in a synctest bubble: fake time.
func waitersAreServedInArrivalOrder(t *testing.T) {
	m := newManager(t)
	cur := mustAcquire(t, m, lease.AcquireRequest{Name: "q", Holder: "first", TTL: time.Minute})
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i, h := range []string{"w1", "w2", "w3"} {
		wg.Go(func() {
			l, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: "q", Holder: h, TTL: time.Minute, Wait: 30 * time.Second})
			if err != nil {
				t.Errorf("%s: %v", h, err)
				return
			}
			mu.Lock()
			order = append(order, l.Holder)
			mu.Unlock()
			_, _ = m.Release(t.Context(), lease.ReleaseRequest{Name: "q", Holder: h, FencingToken: l.FencingToken})
		})
		waitFor(t, func() bool { return m.Waiting() == i+1 })
	}
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: "q", Holder: "first", FencingToken: cur.FencingToken}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(order) != 3 || order[0] != "w1" || order[1] != "w2" || order[2] != "w3" {
		t.Fatalf("served %v, want [w1 w2 w3]", order)
	}
}

// triedStore counts the attempts that have returned, so a test can tell
// a waiter that was refused from one that has not tried yet (a waiter is
// counted by Waiting from just before its first attempt).
type triedStore struct {
	backend.Store
	tried atomic.Int64
}

func (s *triedStore) Try(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	defer s.tried.Add(1)
	return s.Store.Try(ctx, name, decide)
}

func TestWakeFromElsewhere(t *testing.T) { synctest.Test(t, wakeFromElsewhere) }

// wakeFromElsewhere is TestWakeFromElsewhere's body, run in a synctest bubble: fake time.
func wakeFromElsewhere(t *testing.T) {
	store := memory.New()
	a, _ := lease.NewManager(store, lease.Config{})
	bStore := &triedStore{Store: store}
	b, _ := lease.NewManager(bStore, lease.Config{}) // another instance over the same backend
	h := mustAcquire(t, a, lease.AcquireRequest{Name: "e", Holder: "a", TTL: time.Minute})
	got := make(chan error, 1)
	go func() {
		_, err := b.Acquire(t.Context(), lease.AcquireRequest{Name: "e", Holder: "b", TTL: time.Second, Wait: 30 * time.Second})
		got <- err
	}()
	waitFor(t, func() bool { return b.Waiting() == 1 && bStore.tried.Load() >= 1 }) // waiting, and refused once
	if _, err := a.Release(t.Context(), lease.ReleaseRequest{Name: "e", Holder: "a", FencingToken: h.FencingToken}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		t.Fatalf("waiter on another instance returned %v before anything told it", err)
	case <-time.After(100 * time.Millisecond):
	}
	b.Wake("e") // what an event from instance a does
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("woken waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wake did not wake the waiter")
	}
}

// hintedStore is the memory store asking for the adaptive read-first path,
// recording the order of its reads and attempts of one lease as "get" and
// "try".
type hintedStore struct {
	*memory.Store
	name string
	mu   sync.Mutex
	log  []string
}

func (s *hintedStore) Hints() backend.Hints {
	return backend.Hints{ReadFirst: backend.ReadFirstAdaptive}
}

func (s *hintedStore) Get(ctx context.Context, name string) (backend.Snapshot, error) {
	s.note(name, "get")
	return s.Store.Get(ctx, name)
}

func (s *hintedStore) Try(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	s.note(name, "try")
	return s.Store.Try(ctx, name, decide)
}

func (s *hintedStore) note(name, what string) {
	if name != s.name {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, what)
}

func (s *hintedStore) calls() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.log, ",")
}

// TestWokenWaiterExpectsAWrite checks that a waiting acquire, on a store
// that reads first after a refusal (backend.ReadFirstAdaptive), goes
// straight to its attempt after a wake-up or the expiry of the holding,
// without the read a refusal would make it pay.
func TestWokenWaiterExpectsAWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, m *lease.Manager, h lease.Lease)
		want string
	}{
		{"release", func(t *testing.T, m *lease.Manager, h lease.Lease) {
			if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: h.Name, Holder: h.Holder, FencingToken: h.FencingToken}); err != nil {
				t.Fatal(err)
			}
		}, "try,try,get,try,try"}, // a's acquire, b's refusal, a's release (read first after the refusal), b's acquire
		{"expiry", func(*testing.T, *lease.Manager, lease.Lease) {}, "try,try,try"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { // fake time
				store := &hintedStore{Store: memory.New(), name: "h"}
				m, err := lease.NewManager(store, lease.Config{MinTTL: 10 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				h := mustAcquire(t, m, lease.AcquireRequest{Name: "h", Holder: "a", TTL: 300 * time.Millisecond})
				got := make(chan error, 1)
				go func() {
					_, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: "h", Holder: "b", TTL: time.Second, Wait: 10 * time.Second})
					got <- err
				}()
				waitFor(t, func() bool { return store.calls() == "try,try" }) // a's acquire, b's refused attempt
				tc.end(t, m, h)
				if err := <-got; err != nil {
					t.Fatalf("waiting acquire: %v", err)
				}
				if c := store.calls(); c != tc.want {
					t.Fatalf("calls %s, want %s", c, tc.want)
				}
			})
		})
	}
}

// waitFor fails the test unless cond holds once every goroutine of the
// test's synctest bubble is blocked.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	synctest.Wait()
	if !cond() {
		t.Fatal("condition not reached once the bubble was idle")
	}
}

// TestEventEnds: only events that end a holding wake waiters.
func TestEventEnds(t *testing.T) {
	for typ, want := range map[lease.EventType]bool{
		lease.EventAcquired: false, lease.EventReleased: true, lease.EventRevoked: true, lease.EventExpired: true,
	} {
		if got := (lease.Event{Type: typ}).Ends(); got != want {
			t.Errorf("Event{%s}.Ends() = %t, want %t", typ, got, want)
		}
	}
}

// TestOnWaitReportsWaitsBegun: Config.OnWait tells when a waiting acquire
// begins to wait (after its refused attempt; at once behind another
// waiter), and not when an acquire takes the lease without waiting.
func TestOnWaitReportsWaitsBegun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		began := make(chan string, 8)
		m, err := lease.NewManager(memory.New(), lease.Config{OnWait: func(name, holder string) { began <- name + "/" + holder }})
		if err != nil {
			t.Fatal(err)
		}
		a := mustAcquire(t, m, lease.AcquireRequest{Name: "x", Holder: "a", TTL: time.Minute, Wait: time.Second})
		got := make(chan error, 2)
		for _, h := range []string{"b", "c"} {
			go func() {
				_, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: "x", Holder: h, TTL: time.Minute, Wait: time.Minute})
				got <- err
			}()
			if w := <-began; w != "x/"+h {
				t.Fatalf("OnWait(%s), want x/%s", w, h)
			}
			if n := m.Waiting(); n < 1 {
				t.Fatalf("OnWait before the acquire waits: Waiting() = %d", n)
			}
		}
		if len(began) != 0 {
			t.Fatalf("OnWait for a's acquire, which did not wait: %s", <-began)
		}
		if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: "x", Holder: "a", FencingToken: a.FencingToken}); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("the first waiter after the release: %v", err)
		}
		synctest.Wait()
		for len(began) > 0 {
			if w := <-began; w != "x/c" { // c waits on behind b
				t.Fatalf("OnWait(%s) after the release, want only x/c", w)
			}
		}
	})
}
