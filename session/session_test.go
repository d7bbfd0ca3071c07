package session_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// pushes is a Conn that keeps what it is told.
type pushes struct {
	mu sync.Mutex
	ps []session.Push
	ch chan session.Push
}

func newPushes() *pushes { return &pushes{ch: make(chan session.Push, 64)} }

func (p *pushes) Push(x session.Push) {
	p.mu.Lock()
	p.ps = append(p.ps, x)
	p.mu.Unlock()
	p.ch <- x
}

// wait returns the next push of type typ.
func (p *pushes) wait(t *testing.T, typ session.PushType) session.Push {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case x := <-p.ch:
			if x.Type == typ {
				return x
			}
		case <-timeout:
			t.Fatalf("no %s push in 20s", typ)
		}
	}
}

// gated wraps a Manager's Backend: Get waits at gate after its read when
// set, and Renew
// fails while failRenew is set.
type gated struct {
	session.Backend
	gate      chan struct{}
	arrived   chan struct{}
	failRenew atomic.Bool
}

func (g *gated) Get(ctx context.Context, name string) (session.Record, error) {
	rec, err := g.Backend.Get(ctx, name)
	if g.gate != nil {
		g.arrived <- struct{}{}
		<-g.gate
	}
	return rec, err
}

func (g *gated) Renew(ctx context.Context, ref session.Ref, req lease.RenewRequest) (lease.Lease, error) {
	if g.failRenew.Load() {
		return lease.Lease{}, backend.ErrUnavailable
	}
	return g.Backend.Renew(ctx, ref, req)
}

func newRegistry(t *testing.T, b session.Backend, cfg session.Config) *session.Registry {
	t.Helper()
	r, err := session.New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

func manager(t *testing.T, store backend.Store) *lease.Manager {
	t.Helper()
	m, err := lease.NewManager(store, lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRacingResumes: of two resumes that read the same epoch, one wins and
// the other is ErrConflict.
func TestRacingResumes(t *testing.T) {
	store := memory.New()
	m := manager(t, store)
	owner := newRegistry(t, session.Manager{M: m}, session.Config{})
	s, id, err := owner.Open(t.Context(), "c", "", time.Second, newPushes())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	g := &gated{Backend: session.Manager{M: m}, gate: make(chan struct{}), arrived: make(chan struct{}, 2)}
	other := newRegistry(t, g, session.Config{})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, _, _, err := other.Resume(t.Context(), "c", "", id, 2, 0, nil, newPushes(), nil)
			errs <- err
		}()
	}
	<-g.arrived
	<-g.arrived // both read the record at epoch 1
	close(g.gate)
	e1, e2 := <-errs, <-errs
	if (e1 == nil) == (e2 == nil) || !errors.Is(errors.Join(e1, e2), session.ErrConflict) {
		t.Fatalf("resumes: %v, %v; want one nil and one ErrConflict", e1, e2)
	}
}

// TestAckNeedsSafeLeases: while renewals fail, acks stop before a lease's
// safe deadline comes within a window of now; they resume after a renewal
// succeeds.
func TestAckNeedsSafeLeases(t *testing.T) { synctest.Test(t, ackNeedsSafeLeases) }

// ackNeedsSafeLeases runs in fake time: the agent's heartbeats on a
// ticker, the registry's renewals on the bubble's clock.
func ackNeedsSafeLeases(t *testing.T) {
	m := manager(t, memory.New())
	g := &gated{Backend: session.Manager{M: m}}
	r := newRegistry(t, g, session.Config{LeaseTTL: time.Second})
	s, _, err := r.Open(t.Context(), "c", "", 200*time.Millisecond, newPushes())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	start := time.Now()
	if _, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h"}, nil); err != nil {
		t.Fatal(err)
	}
	if !s.Heartbeat(func() {}) {
		t.Fatal("no ack right after the acquire")
	}
	g.failRenew.Store(true)
	heartbeat := time.NewTicker(10 * time.Millisecond) // the agent's interval
	defer heartbeat.Stop()
	for s.Heartbeat(func() {}) {
		// TTL 1s: the acquire's send time + 0.9s must stay a window (0.2s)
		// ahead, so acks stop within 0.7s of the last write.
		if time.Since(start) > 700*time.Millisecond {
			t.Fatalf("still acked %v after the last successful write", time.Since(start))
		}
		<-heartbeat.C
	}
	if time.Since(start) < 500*time.Millisecond {
		t.Fatalf("acks stopped %v after the last successful write, want acks while the deadline (0.9s) is more than a window ahead", time.Since(start))
	}
	g.failRenew.Store(false)
	s.Kick()
	synctest.Wait() // the renewal the kick started has returned
	if !s.Heartbeat(func() {}) {
		t.Fatal("no ack after renewals came back")
	}
}

// TestShutdownMoves: Shutdown asks the socket to move, and returns once
// the session was resumed elsewhere; the moved session's leases are
// untouched.
func TestShutdownMoves(t *testing.T) { synctest.Test(t, shutdownMoves) }

// shutdownMoves runs in fake time: the agent's heartbeats on a ticker.
func shutdownMoves(t *testing.T) {
	store := memory.New()
	m := manager(t, store)
	old := newRegistry(t, session.Manager{M: m}, session.Config{})
	p := newPushes()
	s, id, err := old.Open(t.Context(), "c", "", 200*time.Millisecond, p)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		old.Shutdown(context.Background(), context.Background())
		close(done)
	}()
	if mv := p.wait(t, session.PushMove); mv.Reason != session.MoveShutdown {
		t.Fatalf("move %+v", mv)
	}
	if _, _, err := old.Open(t.Context(), "c", "", time.Second, newPushes()); !errors.Is(err, session.ErrShuttingDown) {
		t.Fatalf("open while shutting down: %v", err)
	}
	next := newRegistry(t, session.Manager{M: manager(t, store)}, session.Config{})
	ns, taken, lost, err := next.Resume(t.Context(), "c2", "", id, 2, 0, []session.Claim{{Name: "a", Holder: "h", FencingToken: l.FencingToken}}, newPushes(), nil)
	if err != nil || len(taken) != 1 || len(lost) != 0 {
		t.Fatalf("resume: %v %v %v", taken, lost, err)
	}
	defer ns.Close(context.Background())
	s.Detach(p)                                        // the agent closed the old socket
	heartbeat := time.NewTicker(50 * time.Millisecond) // the agent's interval
	defer heartbeat.Stop()
	for {
		select {
		case <-done:
			got, err := m.Get(t.Context(), "a")
			if err != nil || !got.Held() || got.SessionEpoch != 2 {
				t.Fatalf("after the move: %+v %v", got, err)
			}
			return
		default:
			if !ns.Heartbeat(func() {}) {
				t.Fatal("the resumed session is not acked")
			}
			<-heartbeat.C
		}
	}
}

// counting wraps a Backend and reports each renew of a name.
type counting struct {
	session.Backend
	renewed chan string
}

func (c *counting) Renew(ctx context.Context, ref session.Ref, req lease.RenewRequest) (lease.Lease, error) {
	select {
	case c.renewed <- req.Name:
	default:
	}
	return c.Backend.Renew(ctx, ref, req)
}

// TestLongWaitCountsFromItsLastAttempt: an acquire that waited for
// another holding counts its write's safety from the attempt that made
// it, not from before the wait: answered without a renewal first, and the
// session acks at once (docs/contract.md §14, S5).
func TestLongWaitCountsFromItsLastAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := manager(t, memory.New())
		b := &counting{Backend: session.Manager{M: m}, renewed: make(chan string, 16)}
		r := newRegistry(t, b, session.Config{LeaseTTL: 30 * time.Second})
		s, _, err := r.Open(t.Context(), "c", "", 5*time.Second, newPushes())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		heartbeatsEvery(t, s, time.Second)
		if _, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: "w", Holder: "other", TTL: 25 * time.Second}); err != nil {
			t.Fatal(err)
		}
		// The other holding runs out after 25 s; the session's acquire
		// waits for it: from its first send, the write would be safe only
		// until +27 s, less than a window (5 s) after its answer.
		if _, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "w", Holder: "h", Wait: 30 * time.Second}, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case name := <-b.renewed:
			t.Fatalf("%s renewed before or at its answer: its safety counted from before the wait", name)
		default:
		}
		if !s.Heartbeat(func() {}) {
			t.Fatal("no ack right after the waited-for acquire")
		}
	})
}

// TestLateEndOfRestartedHolding: a resume restarts with its token a holding
// that the session's death ended; the released event of that death,
// delivered after the resume, neither pushes lost nor drops the holding
// from the session (it would hold the lease unrenewed until its TTL).
func TestLateEndOfRestartedHolding(t *testing.T) {
	store := memory.New()
	m := manager(t, store)
	old := newRegistry(t, session.Manager{M: m}, session.Config{})
	s, id, err := old.Open(t.Context(), "c", "", time.Minute, newPushes())
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "b", Holder: "h"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The old instance's death of the session ended a, and its event is
	// still on the way.
	ended, err := session.Manager{M: m}.Expire(t.Context(), session.Ref{Key: session.Key(id), Epoch: 1, Window: time.Minute},
		lease.ReleaseRequest{Name: "a", Holder: "h", FencingToken: a.FencingToken})
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New()
	next := newRegistry(t, session.Manager{M: m}, session.Config{Events: h})
	p := newPushes()
	ns, taken, lost, err := next.Resume(t.Context(), "c", "", id, 2, 0, []session.Claim{
		{Name: "a", Holder: "h", FencingToken: a.FencingToken}, {Name: "b", Holder: "h", FencingToken: b.FencingToken}}, p, nil)
	if err != nil || len(taken) != 2 || len(lost) != 0 {
		t.Fatalf("resume: %v %v %v", taken, lost, err)
	}
	defer ns.Close(context.Background())
	h.Publish(lease.Event{Type: lease.EventReleased, Reason: session.SessionExpired, Lease: ended, Time: ended.ExpireTime})
	// Then b is taken: the events of one subscription come in order, so
	// its push comes after a's event was handled.
	taker := b
	taker.FencingToken++
	h.Publish(lease.Event{Type: lease.EventAcquired, Lease: taker, Time: time.Now()})
	if got := p.wait(t, session.PushLost); got.Name != "b" {
		t.Fatalf("pushed %+v for the late end of the restarted holding", got)
	}
	if n := ns.Leases(); n != 1 {
		t.Fatalf("the session holds %d leases; want 1 (a)", n)
	}
}

// TestResumeWritesWindow: a resume that changes the window writes it into
// the session record's metadata too (docs/contract.md §14 session record).
func TestResumeWritesWindow(t *testing.T) {
	m := manager(t, memory.New())
	r := newRegistry(t, session.Manager{M: m}, session.Config{})
	s, id, err := r.Open(t.Context(), "c", "", time.Second, newPushes())
	if err != nil {
		t.Fatal(err)
	}
	ns, _, _, err := r.Resume(t.Context(), "c", "", id, 2, 2*time.Second, nil, newPushes(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close(context.Background())
	if _, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h"}, nil); !errors.Is(err, session.ErrClosed) {
		t.Fatalf("the resumed-over session acquired: %v", err)
	}
	rec, err := m.Get(t.Context(), session.RecordName(session.Key(id)))
	if err != nil {
		t.Fatal(err)
	}
	if string(rec.Metadata) != `{"windowMs":2000}` || rec.SessionWindow != 2*time.Second {
		t.Fatalf("record metadata %s, window %v; want windowMs 2000", rec.Metadata, rec.SessionWindow)
	}
}

// TestResumeHereAtTheLimit: a caller at its session limit resumes a
// session that still lives on this instance (its socket dropped and the
// new one came back here): the resume takes the old session's slot over
// instead of being refused, and the count stays at one.
func TestResumeHereAtTheLimit(t *testing.T) {
	r := newRegistry(t, session.Manager{M: manager(t, memory.New())}, session.Config{MaxPerCaller: 1})
	_, id, err := r.Open(t.Context(), "c", "", time.Second, newPushes())
	if err != nil {
		t.Fatal(err)
	}
	ns, _, _, err := r.Resume(t.Context(), "c", "", id, 2, 0, nil, newPushes(), nil)
	if err != nil {
		t.Fatalf("resume here at the caller's limit: %v", err)
	}
	defer ns.Close(context.Background())
	var limit *session.LimitError
	if _, _, err := r.Open(t.Context(), "c", "", time.Second, newPushes()); !errors.As(err, &limit) {
		t.Fatalf("a second open of the caller: %v; want a LimitError", err)
	}
	if n := r.Len(); n != 1 {
		t.Fatalf("%d sessions; want 1", n)
	}
}
