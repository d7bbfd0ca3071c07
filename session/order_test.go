package session_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// The rules that order a session's owners (docs/contract.md §14, "Every
// owner, in order"), each against the case that broke it.

// openHolding opens a session on r with window w and acquires lease name
// into it.
func openHolding(t *testing.T, r *session.Registry, w time.Duration, name string) (*session.Session, string, lease.Lease) {
	t.Helper()
	s, id, err := r.Open(t.Context(), "c", "", w, newPushes())
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "h"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, id, l
}

func claim(l lease.Lease) []session.Claim {
	return []session.Claim{{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken}}
}

// TestLateResumeLoses: issue 36 finding 1. The agent sent resume R1
// (epoch 2) to a paused instance B, gave up, and resumed on C (R2, epoch 3).
// When B wakes and handles R1, it must not take the session from C: R1 is
// session_conflict, nothing is registered on B, and C's holding is
// untouched (S1).
func TestLateResumeLoses(t *testing.T) {
	m := manager(t, memory.New())
	a, b, c := newRegistry(t, session.Manager{M: m}, session.Config{}), newRegistry(t, session.Manager{M: m}, session.Config{}), newRegistry(t, session.Manager{M: m}, session.Config{})
	_, id, l := openHolding(t, a, time.Second, "x")
	sc, _, _, err := c.Resume(t.Context(), "c", "", id, 3, 0, claim(l), newPushes(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(context.Background())
	_, _, _, err = b.Resume(t.Context(), "c", "", id, 2, 0, claim(l), newPushes(), nil)
	var ce *session.ConflictError
	if !errors.As(err, &ce) || ce.Epoch != 3 || !errors.Is(err, session.ErrConflict) {
		t.Fatalf("late resume at epoch 2 after one at 3: %v; want a ConflictError at epoch 3", err)
	}
	if b.Len() != 0 {
		t.Fatalf("the late resume registered %d sessions on B", b.Len())
	}
	got, err := m.Get(t.Context(), "x")
	if err != nil || !got.Held() || got.SessionEpoch != 3 {
		t.Fatalf("the lease after the late resume: %+v, %v; want held at epoch 3", got, err)
	}
	// A duplicate of R2 (the same epoch) is refused too.
	if _, _, _, err := b.Resume(t.Context(), "c", "", id, 3, 0, claim(l), newPushes(), nil); !errors.Is(err, session.ErrConflict) {
		t.Fatalf("a duplicated resume at epoch 3: %v; want ErrConflict", err)
	}
}

// TestEarlierOwnerLetsGo: when the late resume wins the race (B takes
// epoch 2 before C takes 3), B's next write finds the session at epoch 3:
// B stops acking at once and ends the session as moved (S4), touching
// nothing of C's.
func TestEarlierOwnerLetsGo(t *testing.T) { synctest.Test(t, earlierOwnerLetsGo) }

func earlierOwnerLetsGo(t *testing.T) {
	m := manager(t, memory.New())
	a, b, c := newRegistry(t, session.Manager{M: m}, session.Config{}), newRegistry(t, session.Manager{M: m}, session.Config{}), newRegistry(t, session.Manager{M: m}, session.Config{})
	sa, id, l := openHolding(t, a, session.MinWindow, "x")
	sb, _, _, err := b.Resume(t.Context(), "c", "", id, 2, 0, claim(l), newPushes(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sc, _, _, err := c.Resume(t.Context(), "c", "", id, 3, 0, claim(l), newPushes(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(context.Background())
	defer sa.Close(context.Background())
	sb.Kick()
	synctest.Wait()
	if b.Len() != 0 {
		t.Fatal("B still owns the session after its renewal found epoch 3")
	}
	if sb.Heartbeat(func() {}) {
		t.Fatal("B acked after its renewal found the session at epoch 3")
	}
	got, err := m.Get(t.Context(), "x")
	if err != nil || !got.Held() || got.SessionEpoch != 3 {
		t.Fatalf("the lease after B let go: %+v, %v; want held at epoch 3", got, err)
	}
}

// stallGet is a Backend whose Get never answers while stall is set: a
// decision that waits for a read cannot come out.
type stallGet struct {
	session.Backend
	stall atomic.Bool
}

func (s *stallGet) Get(ctx context.Context, name string) (session.Record, error) {
	if s.stall.Load() {
		<-ctx.Done()
		return session.Record{}, ctx.Err()
	}
	return s.Backend.Get(ctx, name)
}

// order is a Conn that logs pushes and acks in the order they are queued.
type order struct {
	mu  sync.Mutex
	log []string
}

func (o *order) Push(p session.Push) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.log = append(o.log, string(p.Type)+":"+p.Reason)
}

func (o *order) ack() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.log = append(o.log, "ack")
}

func (o *order) snapshot() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.log...)
}

// TestLostBeforeAck: issue 36 finding 2. When a renewal finds a lease
// lost, the lost push is queued before any ack decided after the loss,
// with the reason the failed write found: no backend read stands between
// (S2). Here the lease was revoked, and reads never answer.
func TestLostBeforeAck(t *testing.T) { synctest.Test(t, lostBeforeAck) }

func lostBeforeAck(t *testing.T) {
	m := manager(t, memory.New())
	g := &stallGet{Backend: session.Manager{M: m}}
	r := newRegistry(t, g, session.Config{})
	o := &order{}
	s, _, err := r.Open(t.Context(), "c", "", time.Second, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "x", Holder: "h"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "y", Holder: "h"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Revoke(t.Context(), lease.RevokeRequest{Name: "x", Reason: "stuck", Operator: "ops"}); err != nil {
		t.Fatal(err)
	}
	g.stall.Store(true)
	s.Kick()
	synctest.Wait()
	if n := s.Leases(); n != 1 {
		t.Fatalf("the session holds %d leases after the revoke; want 1", n)
	}
	g.stall.Store(false) // let the end of the test read
	if !s.Heartbeat(o.ack) {
		t.Fatal("the session stopped acking for its other lease: one loss must not end the rest")
	}
	if got := o.snapshot(); len(got) != 2 || got[0] != "revoked:stuck" || got[1] != "ack" {
		t.Fatalf("queued %v; want the revoked push, then the ack", got)
	}
}

// TestRenewLostBeforeAck: the agent's own renew (a checkpoint) finds the
// lease revoked. Its lease_lost answer is written by the socket after the
// session's lock is gone, so a heartbeat acked in between would vouch for
// a lease the agent still counts: the lost push is queued first (S2).
func TestRenewLostBeforeAck(t *testing.T) { synctest.Test(t, renewLostBeforeAck) }

func renewLostBeforeAck(t *testing.T) {
	m := manager(t, memory.New())
	r := newRegistry(t, session.Manager{M: m}, session.Config{})
	o := &order{}
	s, _, err := r.Open(t.Context(), "c", "", time.Second, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	x, err := s.Acquire(t.Context(), lease.AcquireRequest{Name: "x", Holder: "h"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Revoke(t.Context(), lease.RevokeRequest{Name: "x", Reason: "stuck", Operator: "ops"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Renew(t.Context(), lease.RenewRequest{Name: "x", Holder: "h", FencingToken: x.FencingToken, Checkpoint: []byte(`{"n":1}`)})
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("renew of a revoked lease: %v; want lease_lost", err)
	}
	if !s.Heartbeat(o.ack) {
		t.Fatal("no ack once the lost lease left the session")
	}
	if got := o.snapshot(); len(got) != 2 || got[0] != "revoked:stuck" || got[1] != "ack" {
		t.Fatalf("queued %v; want the revoked push, then the ack", got)
	}
}

// offsetClock is the process's clock moved on by off.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

func (c *offsetClock) AfterFunc(d time.Duration, f func()) session.Timer { return time.AfterFunc(d, f) }

// elapse lets d of fake time pass in a synctest bubble, then waits until
// every goroutine of the bubble is blocked: what d brings has happened.
func elapse(d time.Duration) {
	<-time.After(d)
	synctest.Wait()
}

// lapsedRecord is a Backend on which the session record's renewal finds
// the record run out.
type lapsedRecord struct{ session.Backend }

func (l lapsedRecord) Renew(ctx context.Context, ref session.Ref, req lease.RenewRequest) (lease.Lease, error) {
	if len(req.Name) > len(session.RecordPrefix) && req.Name[:len(session.RecordPrefix)] == session.RecordPrefix {
		return lease.Lease{}, &lease.LostError{Reason: lease.LostExpired}
	}
	return l.Backend.Renew(ctx, ref, req)
}

// TestRecordLapseIsExpiry: issue 36 finding 3. A session whose record ran
// out is an expiry, not a move: it stops acking at once, and a window
// later releases its leases (reason session_expired), so that the next
// holder need not wait a TTL.
func TestRecordLapseIsExpiry(t *testing.T) { synctest.Test(t, recordLapseIsExpiry) }

func recordLapseIsExpiry(t *testing.T) {
	m := manager(t, memory.New())
	clock := &offsetClock{}
	r := newRegistry(t, lapsedRecord{session.Manager{M: m}}, session.Config{Clock: clock})
	s, _, l := openHolding(t, r, session.MinWindow, "x")
	clock.off.Store(int64(r.Config().RecordTTL(session.MinWindow) / 3)) // the record's renewal is due
	s.Kick()
	synctest.Wait()
	if r.Len() != 0 {
		t.Fatal("the session lives on after its record was found run out")
	}
	if s.Heartbeat(func() {}) {
		t.Fatal("acked after the record was found run out")
	}
	elapse(session.MinWindow - time.Millisecond)
	if got, err := m.Get(t.Context(), "x"); err != nil || !got.Held() {
		t.Fatalf("the lease %v after the lapse was found: %+v, %v; want held until a window has passed", session.MinWindow-time.Millisecond, got, err)
	}
	elapse(time.Millisecond)
	got, err := m.Get(t.Context(), "x")
	if err != nil || got.Held() || got.FencingToken != l.FencingToken || got.SessionKey == "" {
		t.Fatalf("the lease a window after the lapse: %+v, %v; want ended with the same token, as a session expiry", got, err)
	}
}

// TestOpsOnEndedSession: a release racing the end of its session is
// ErrClosed (503 over the socket: resume and retry, finding 3), and the
// holding is left to the session's new owner.
func TestOpsOnEndedSession(t *testing.T) {
	m := manager(t, memory.New())
	a, b := newRegistry(t, session.Manager{M: m}, session.Config{}), newRegistry(t, session.Manager{M: m}, session.Config{})
	sa, id, l := openHolding(t, a, time.Second, "x")
	sb, _, _, err := b.Resume(t.Context(), "c", "", id, 2, 0, claim(l), newPushes(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	if _, err := sa.Release(t.Context(), lease.ReleaseRequest{Name: "x", Holder: "h", FencingToken: l.FencingToken}); !errors.Is(err, session.ErrClosed) {
		t.Fatalf("release through the moved-from session: %v; want ErrClosed", err)
	}
	if got, err := m.Get(t.Context(), "x"); err != nil || !got.Held() || got.SessionEpoch != 2 {
		t.Fatalf("the lease: %+v, %v; want still held at epoch 2", got, err)
	}
	if _, err := sa.Release(t.Context(), lease.ReleaseRequest{Name: "x", Holder: "h", FencingToken: l.FencingToken}); !errors.Is(err, session.ErrClosed) {
		t.Fatalf("release after the session ended here: %v; want ErrClosed", err)
	}
}
