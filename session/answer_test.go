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

// late wraps a Backend: the backend decides at once, and its answer to
// the next Acquire (and Renew, while renewLate is set) comes back lateBy
// later, as across a partition on the way back (docs/contract.md §14,
// Operations in flight).
type late struct {
	session.Backend
	lateBy    time.Duration
	renewLate atomic.Bool
	renews    atomic.Int32
}

func (b *late) Acquire(ctx context.Context, ref session.Ref, req lease.AcquireRequest) (lease.Lease, error) {
	l, err := b.Backend.Acquire(ctx, ref, req)
	time.Sleep(b.lateBy) // the bubble's clock: the answer is late, the decision was not
	return l, err
}

func (b *late) Renew(ctx context.Context, ref session.Ref, req lease.RenewRequest) (lease.Lease, error) {
	b.renews.Add(1)
	l, err := b.Backend.Renew(ctx, ref, req)
	if b.renewLate.Load() {
		time.Sleep(b.lateBy)
	}
	return l, err
}

// heartbeats heartbeats s every 50ms (the agent's window/4) until the
// test ends, so that the session lives through a late answer.
func heartbeats(t *testing.T, s *session.Session) { heartbeatsEvery(t, s, 50*time.Millisecond) }

// heartbeatsEvery heartbeats s every d until the test ends.
func heartbeatsEvery(t *testing.T, s *session.Session, d time.Duration) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				s.Heartbeat(func() {})
			}
		}
	}()
}

// lateAcquire opens a session (window 200ms, lease TTL 1s: an answer is
// safe while it comes within 0.9s − 0.2s of its send) on a backend whose
// acquire answers come lateBy late, and acquires "a" through it with an
// answer that records whether it was queued.
func lateAcquire(t *testing.T, lateBy time.Duration, renewLate bool) (m *lease.Manager, l lease.Lease, answered bool, b *late, err error) {
	t.Helper()
	m = manager(t, memory.New())
	b = &late{Backend: session.Manager{M: m}}
	r := newRegistry(t, b, session.Config{LeaseTTL: time.Second})
	s, _, err := r.Open(t.Context(), "c", "", 200*time.Millisecond, newPushes())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	heartbeats(t, s)
	b.lateBy = lateBy
	b.renewLate.Store(renewLate)
	l, err = s.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h"}, func(lease.Lease) func() {
		return func() { answered = true }
	})
	return m, l, answered, b, err
}

// TestLateAnswerPastTTLIsNotHeld: an acquire answered after its holding
// ran out on the backend, and another holder took it, is not answered as
// held: the renewal S5 asks for finds it taken, and the acquire is
// ErrUnsafe (a retry answers who holds it now).
func TestLateAnswerPastTTLIsNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := manager(t, memory.New())
		b := &late{Backend: session.Manager{M: m}}
		r := newRegistry(t, b, session.Config{LeaseTTL: time.Second})
		s, _, err := r.Open(t.Context(), "c", "", 200*time.Millisecond, newPushes())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		heartbeats(t, s)
		b.lateBy = 1100 * time.Millisecond // past the 1s TTL
		contender := make(chan lease.Lease, 1)
		go func() {
			time.Sleep(10 * time.Millisecond) // after the decision
			l, err := m.Acquire(context.Background(), lease.AcquireRequest{Name: "a", Holder: "other", TTL: time.Minute, Wait: 5 * time.Second})
			if err != nil {
				t.Error(err)
			}
			contender <- l
		}()
		var answered bool
		_, err = s.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h"}, func(lease.Lease) func() {
			return func() { answered = true }
		})
		c := <-contender
		if answered || !errors.Is(err, session.ErrUnsafe) {
			t.Fatalf("late acquire: answered %v, err %v; want no answer and ErrUnsafe (the contender holds token %d since %v)", answered, err, c.FencingToken, c.AcquireTime)
		}
		if s.Leases() != 0 {
			t.Fatalf("the session holds %d leases, want 0", s.Leases())
		}
	})
}

// TestLateAnswerIsRenewedFirst: an acquire answered too late to be safe
// for a window, but before its holding ran out, is written again and
// answered from that write.
func TestLateAnswerIsRenewedFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		_, l, answered, b, err := lateAcquire(t, 800*time.Millisecond, false)
		if err != nil || !answered {
			t.Fatalf("acquire: answered %v, err %v", answered, err)
		}
		if b.renews.Load() != 1 {
			t.Fatalf("%d renewals before the answer, want 1", b.renews.Load())
		}
		if !l.RenewTime.After(start.Add(700 * time.Millisecond)) {
			t.Fatalf("answered the acquire's write (renewed %v after the send), not the renewal's", l.RenewTime.Sub(start))
		}
	})
}

// TestLateAnswerAndLateRenewal: when the renewal comes back late too, the
// acquire is ErrUnsafe, nothing is answered and the holding is ended.
func TestLateAnswerAndLateRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _, answered, _, err := lateAcquire(t, 800*time.Millisecond, true)
		if answered || !errors.Is(err, session.ErrUnsafe) {
			t.Fatalf("acquire: answered %v, err %v; want ErrUnsafe", answered, err)
		}
		got, err := m.Get(context.Background(), "a")
		if err != nil {
			t.Fatal(err)
		}
		if got.Held() {
			t.Fatalf("the unanswered holding is still held: %+v", got)
		}
	})
}

// TestTimelyAnswerIsNotRenewed: an answer within the safe span is given
// at once, with no extra write.
func TestTimelyAnswerIsNotRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, answered, b, err := lateAcquire(t, 100*time.Millisecond, false)
		if err != nil || !answered || b.renews.Load() != 0 {
			t.Fatalf("acquire: answered %v, err %v, %d renewals; want an answer and no renewal", answered, err, b.renews.Load())
		}
	})
}

// TestResumeEpochBounded: a resume may propose at most the session's epoch
// + MaxEpochJump, so that the session can always be resumed again.
func TestResumeEpochBounded(t *testing.T) {
	m := manager(t, memory.New())
	owner := newRegistry(t, session.Manager{M: m}, session.Config{})
	s, id, err := owner.Open(t.Context(), "c", "", time.Second, newPushes())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	other := newRegistry(t, session.Manager{M: m}, session.Config{})
	var ee *session.EpochError
	if _, _, _, err := other.Resume(t.Context(), "c", "", id, 1+session.MaxEpochJump+1, 0, nil, newPushes(), nil); !errors.As(err, &ee) || ee.Max != 1+session.MaxEpochJump {
		t.Fatalf("resume past the jump: %v; want an EpochError with Max %d", err, 1+session.MaxEpochJump)
	}
	ns, _, _, err := other.Resume(t.Context(), "c", "", id, 1+session.MaxEpochJump, 0, nil, newPushes(), nil)
	if err != nil {
		t.Fatalf("resume at the largest jump: %v", err)
	}
	defer ns.Close(context.Background())
}
