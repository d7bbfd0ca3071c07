package session_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// adv wraps a Backend with per-op knobs.
type adv struct {
	session.Backend
	acquireLate    atomic.Int64  // ns: the next Acquire's answer is late by this (decided at once)
	failRenew      atomic.Bool   // the next Renew fails (backend unavailable), nothing written
	releaseGate    chan struct{} // if set, Release waits here before reaching the backend
	releaseLate    time.Duration // then its answer is late by this
	releaseDecided chan struct{}
}

func (b *adv) Acquire(ctx context.Context, ref session.Ref, req lease.AcquireRequest) (lease.Lease, error) {
	l, err := b.Backend.Acquire(ctx, ref, req)
	if d := b.acquireLate.Swap(0); d > 0 {
		time.Sleep(time.Duration(d))
	}
	return l, err
}

func (b *adv) Renew(ctx context.Context, ref session.Ref, req lease.RenewRequest) (lease.Lease, error) {
	if b.failRenew.Swap(false) {
		return lease.Lease{}, errors.New("backend unavailable")
	}
	return b.Backend.Renew(ctx, ref, req)
}

func (b *adv) Release(ctx context.Context, ref session.Ref, req lease.ReleaseRequest) (lease.Lease, error) {
	if b.releaseGate != nil {
		<-b.releaseGate
	}
	l, err := b.Backend.Release(ctx, ref, req)
	if b.releaseDecided != nil {
		select {
		case <-b.releaseDecided:
		default:
			close(b.releaseDecided)
		}
	}
	time.Sleep(b.releaseLate)
	return l, err
}

func setupAdv(t *testing.T) (*lease.Manager, *adv, *session.Session) {
	m := manager(t, memory.New())
	b := &adv{Backend: session.Manager{M: m}}
	r := newRegistry(t, b, session.Config{LeaseTTL: time.Second}) // W 200ms, T 1s
	s, _, err := r.Open(t.Context(), "c", "", 200*time.Millisecond, newPushes())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	heartbeats(t, s)
	return m, b, s
}

// TestRetriedAcquireAnsweredLateKeepsTheHolding: a repeated acquire of a
// lease the session holds, answered late and then unable to renew, must
// not end the holding the first acquire answered: the agent leads it, and
// the table's renewals keep it (found by an adversarial review: the
// failed S5 renewal expired it while the instance still acked).
func TestRetriedAcquireAnsweredLateKeepsTheHolding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, b, s := setupAdv(t)
		l1, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h"}, func(lease.Lease) func() { return func() {} })
		if err != nil {
			t.Fatal(err)
		}
		b.acquireLate.Store(int64(800 * time.Millisecond)) // > 0.9 TTL - window
		go func() {
			time.Sleep(750 * time.Millisecond) // just before the late answer: its renewal fails
			b.failRenew.Store(true)
		}()
		_, _ = s.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h"}, func(lease.Lease) func() { return func() {} })
		got, err := m.Get(context.Background(), "a")
		if err != nil {
			t.Fatal(err)
		}
		if s.Leases() == 1 && (!got.Held() || got.FencingToken != l1.FencingToken) {
			t.Fatalf("the session's table holds a/%d and acks for it, but the backend shows %+v", l1.FencingToken, got)
		}
	})
}

// TestAcquireWhileItsReleaseIsInFlight: an acquire of a holding whose
// release is under way, decided before the release, is not answered as
// held: the release may end it the next moment, while the agent would
// lead it on the instance's acks.
func TestAcquireWhileItsReleaseIsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, b, s := setupAdv(t)
		l1, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h"}, func(lease.Lease) func() { return func() {} })
		if err != nil {
			t.Fatal(err)
		}
		b.releaseGate = make(chan struct{})
		b.releaseDecided = make(chan struct{})
		b.releaseLate = 5 * time.Second
		released := make(chan error, 1)
		go func() {
			_, err := s.Release(context.Background(), lease.ReleaseRequest{Name: "a", Holder: "h", FencingToken: l1.FencingToken})
			released <- err
		}()
		time.Sleep(10 * time.Millisecond) // the release is sent, not decided
		var answered bool
		l2, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h"}, func(lease.Lease) func() { return func() { answered = true } })
		if answered || !errors.Is(err, session.ErrUnsafe) {
			t.Fatalf("acquire while its release is under way: answered %v (token %d), err %v; want no answer and ErrUnsafe", answered, l2.FencingToken, err)
		}
		close(b.releaseGate)
		if err := <-released; err != nil {
			t.Fatal(err)
		}
		if s.Leases() != 0 {
			t.Fatalf("the table holds %d leases after the release", s.Leases())
		}
	})
}
