package sessionsim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// Store is the shared backend: the memory store, whose server clock is the
// bubble's, failing while an outage lasts, and watched: every write that
// begins a holding (a live holding whose holder or fencing token differs
// from the lease's last live one) goes to the checker, at the server time
// of its decision.
type Store struct {
	w      *World
	inner  *memory.Store
	outage atomic.Int64 // the store fails until this bubble time (UnixNano)

	mu   sync.Mutex // orders the writes as the store decided them
	last map[string]Holding
}

var _ backend.Store = (*Store)(nil)

func newStore(w *World) *Store {
	return &Store{w: w, inner: memory.New(memory.WithClock(time.Now)), last: map[string]Holding{}}
}

// down reports whether the backend is in an outage.
func (s *Store) down() error {
	if time.Now().UnixNano() < s.outage.Load() {
		return fmt.Errorf("%w: simulated outage", backend.ErrUnavailable)
	}
	return nil
}

// Fail makes the store fail every call for d.
func (s *Store) Fail(d time.Duration) {
	s.outage.Store(time.Now().Add(d).UnixNano())
	s.w.logf("backend: outage for %v", d)
}

// Get implements backend.Store.
func (s *Store) Get(ctx context.Context, name string) (backend.Snapshot, error) {
	if err := s.down(); err != nil {
		return backend.Snapshot{}, err
	}
	return s.inner.Get(ctx, name)
}

// Try implements backend.Store.
func (s *Store) Try(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	if err := s.down(); err != nil {
		return backend.Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, err := s.inner.Try(ctx, name, decide)
	if err == nil && snap.Row != nil && !strings.HasPrefix(name, session.RecordPrefix) {
		s.observe(name, snap)
	}
	return snap, err
}

// observe passes a holding that snap begins to the checker; s.mu held.
func (s *Store) observe(name string, snap backend.Snapshot) {
	rec, err := lease.DecodeRow(*snap.Row)
	if err != nil || !rec.DeleteTime.IsZero() || !snap.ServerTime.Before(rec.ExpireTime) {
		return
	}
	h := Holding{Name: name, Holder: rec.Holder, FencingToken: rec.FencingToken}
	if s.last[name] == h {
		return
	}
	s.last[name] = h
	s.w.logf("backend: %s begins %s token %d (session epoch %d)", name, h.Holder, h.FencingToken, rec.SessionEpoch)
	s.w.check.begin(h, snap.ServerTime)
}

// List implements backend.Store.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]backend.Row, time.Time, error) {
	if err := s.down(); err != nil {
		return nil, time.Time{}, err
	}
	return s.inner.List(ctx, prefix, after, limit)
}

// Ping implements backend.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.down(); err != nil {
		return err
	}
	return s.inner.Ping(ctx)
}

// gate is an instance's way to the backend (session.Backend): each call
// takes the instance's latency each way, and a paused instance sends
// nothing and reads no answer until it wakes. The backend decides a call
// as soon as it arrives; its answer may come back late (World.Late): it
// reaches the instance that much later, past the session lease TTL
// included, while everything else goes on (the instance's renewals, the
// events, other instances' work), or never, when the call's context ends
// first.
type gate struct {
	in *Instance
	b  session.Backend
}

// send is the way of a call to the backend: it leaves when the instance
// is awake and arrives after the latency.
func (g gate) send() {
	g.in.awaitAwake()
	time.Sleep(g.in.Latency)
}

// answer is the way back: after the latency, the instance reads it once
// awake.
func (g gate) answer() {
	time.Sleep(g.in.Latency)
	g.in.awaitAwake()
}

// call runs one call of the instance to the backend: op (the method) of
// name, decided by f when it arrives, and answered late when a rule of
// World.Late says so. An answer later than the call's context lasts is
// lost: the caller gets the context's error, as a caller that gives up
// would, and the backend's decision stands. Close lifts the delays of the
// answers on their way.
func call[T any](ctx context.Context, g gate, op, name string, f func() (T, error)) (T, error) {
	g.send()
	v, err := f()
	if d := g.in.late(op); d > 0 {
		w := g.in.w
		w.logf("instance %d: backend %s %s decided (%s); the answer comes %v late", g.in.K, op, name, outcome(err), d)
		t := time.NewTimer(d)
		select {
		case <-t.C:
			w.logf("instance %d: the late answer of %s %s arrives", g.in.K, op, name)
		case <-w.lifted:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			w.logf("instance %d: the late answer of %s %s is lost: %v", g.in.K, op, name, ctx.Err())
			var zero T
			return zero, ctx.Err()
		}
	}
	g.answer()
	return v, err
}

// outcome tells the result of a backend call for the trace.
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

var _ session.Backend = gate{}

func (g gate) Acquire(ctx context.Context, ref session.Ref, req lease.AcquireRequest) (lease.Lease, error) {
	return call(ctx, g, "Acquire", req.Name, func() (lease.Lease, error) { return g.b.Acquire(ctx, ref, req) })
}

func (g gate) Renew(ctx context.Context, ref session.Ref, req lease.RenewRequest) (lease.Lease, error) {
	return call(ctx, g, "Renew", req.Name, func() (lease.Lease, error) { return g.b.Renew(ctx, ref, req) })
}

func (g gate) Release(ctx context.Context, ref session.Ref, req lease.ReleaseRequest) (lease.Lease, error) {
	return call(ctx, g, "Release", req.Name, func() (lease.Lease, error) { return g.b.Release(ctx, ref, req) })
}

func (g gate) Transfer(ctx context.Context, ref session.Ref, req lease.TransferRequest) (lease.Lease, error) {
	return call(ctx, g, "Transfer", req.Name, func() (lease.Lease, error) { return g.b.Transfer(ctx, ref, req) })
}

func (g gate) Expire(ctx context.Context, ref session.Ref, req lease.ReleaseRequest) (lease.Lease, error) {
	return call(ctx, g, "Expire", req.Name, func() (lease.Lease, error) { return g.b.Expire(ctx, ref, req) })
}

func (g gate) TakeOver(ctx context.Context, ref session.Ref, req session.TakeOver) (lease.Lease, error) {
	return call(ctx, g, "TakeOver", req.Name, func() (lease.Lease, error) { return g.b.TakeOver(ctx, ref, req) })
}

func (g gate) Get(ctx context.Context, name string) (session.Record, error) {
	return call(ctx, g, "Get", name, func() (session.Record, error) { return g.b.Get(ctx, name) })
}
