package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leasesvc/leasesvc/backend"
)

// Config configures a Manager. The zero value of every field means its
// default.
type Config struct {
	// MinTTL is the shortest TTL a holder may ask for. Default 1s.
	MinTTL time.Duration
	// MaxTTL is the longest TTL a holder may ask for. Default 1h.
	MaxTTL time.Duration
	// MaxWait is the longest an acquire may wait for a held lease. Default 60s.
	MaxWait time.Duration
	// MaxCandidates is how many waiting candidates one lease registers, at
	// most (docs/contract.md §8). Default DefaultMaxCandidates.
	MaxCandidates int
	// OnChange, if set, is called once after every committed change of
	// holding (acquired, released), synchronously on the request's
	// goroutine; it must not block.
	OnChange func(Event)
	// OnWait, if set, is called each time a waiting acquire (Wait > 0)
	// begins to wait: after its first attempt was refused (a candidate is
	// registered by then), or at once when others wait ahead of it, and
	// again after each wake-up or refused retry. It runs on the acquire's
	// goroutine and must not block. For tests, which wait on it instead of
	// guessing when a wait has begun.
	OnWait func(name, holder string)
}

// Defaults of Config.
const (
	DefaultMinTTL  = time.Second
	DefaultMaxTTL  = time.Hour
	DefaultMaxWait = time.Minute
)

// Manager applies the lease rules of docs/contract.md §3 over a backend.Store. It is safe
// for concurrent use.
type Manager struct {
	store   backend.Store // as given: Purge asks it for backend.Remover
	loop    records
	cfg     Config
	waiters waitQueues
}

// NewManager returns a Manager over store. It checks cfg and names the first
// bad field. The loop options set how the Manager's backend.Loop drives
// store, over what store declares (backend.Hinter): the service passes
// those its backend's opener returned (backend.Opened.Loop).
func NewManager(store backend.Store, cfg Config, loop ...backend.LoopOption) (*Manager, error) {
	if store == nil {
		return nil, errors.New("lease: NewManager: store is nil")
	}
	if cfg.MinTTL == 0 {
		cfg.MinTTL = DefaultMinTTL
	}
	if cfg.MaxTTL == 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.MaxCandidates == 0 {
		cfg.MaxCandidates = DefaultMaxCandidates
	}
	switch {
	case cfg.MinTTL < time.Millisecond || cfg.MinTTL%time.Millisecond != 0:
		return nil, fmt.Errorf("lease: Config.MinTTL %v must be a whole number of milliseconds ≥ 1ms", cfg.MinTTL)
	case cfg.MaxTTL < cfg.MinTTL || cfg.MaxTTL%time.Millisecond != 0:
		return nil, fmt.Errorf("lease: Config.MaxTTL %v must be a whole number of milliseconds ≥ MinTTL %v", cfg.MaxTTL, cfg.MinTTL)
	case cfg.MaxWait < 0:
		return nil, fmt.Errorf("lease: Config.MaxWait %v must not be negative", cfg.MaxWait)
	case cfg.MaxCandidates < 0:
		return nil, fmt.Errorf("lease: Config.MaxCandidates %d must not be negative", cfg.MaxCandidates)
	}
	return &Manager{store: store, loop: records{backend.NewLoop(store, loop...)}, cfg: cfg, waiters: waitQueues{q: map[string][]*waiter{}}}, nil
}

// Config returns the Manager's configuration with defaults filled in.
func (m *Manager) Config() Config { return m.cfg }

// AcquireRequest asks for a lease (docs/contract.md §3 acquire).
type AcquireRequest struct {
	// Name is the lease name.
	Name string
	// Holder is the caller's identity.
	Holder string
	// TTL is the lease duration asked for, within the Manager's bounds.
	TTL time.Duration
	// Metadata is a JSON object to attach; nil attaches none to a new
	// holding and keeps the stored one on a repeat acquire by the holder.
	Metadata json.RawMessage
	// Wait is how long to wait for a lease held by another (0 … MaxWait).
	Wait time.Duration
	// Principal is the authenticated caller ("" without authentication).
	// The holding records it; only that principal may renew or release it,
	// or acquire it again as the same holder.
	Principal string
	// Priority (0 … MaxPriority) is recorded on the holding this acquire
	// begins and ranks the request as a candidate (docs/contract.md §8).
	Priority int
	// Candidate registers a waiting acquire (Wait > 0) as a candidate for
	// the lease, seen by every instance, while it waits. The HTTP API sets
	// it when the request carries a priority; without it an acquire waits
	// as before succession existed.
	Candidate bool
	// Preempt, on a candidate whose Priority is strictly higher than the
	// holding's, asks the holder to step down (its renewals answer with
	// YieldTo). Nothing is taken by force.
	Preempt bool
	// Session, if set, acquires into that session (docs/contract.md §14):
	// the holding records it, TTL is the session lease TTL (any whole
	// number of milliseconds > 0; MinTTL and MaxTTL do not bound it), and
	// a repeat acquire of a holding held through the same session at
	// another epoch is ErrLost. Without it, a new holding is not held
	// through any session, and a repeat acquire by the holder of a live
	// session-held holding is ErrSessionHeld.
	Session *SessionRef
	// OnAttempt, if set, is called before each attempt to acquire (the
	// first, and each after a wait), ahead of the attempt's read: the
	// backend decides the write no sooner, so a caller counting the
	// holding's safety from its own clock counts from the last call, not
	// from before a wait (docs/contract.md §14, S5).
	OnAttempt func()
}

// RenewRequest extends a holding (docs/contract.md §3 renew).
type RenewRequest struct {
	// Name is the lease name.
	Name string
	// Holder is the caller's identity.
	Holder string
	// FencingToken is the token of the caller's holding.
	FencingToken int64
	// TTL is the new duration; 0 keeps the holding's TTL.
	TTL time.Duration
	// Metadata replaces the stored metadata; nil keeps it.
	Metadata json.RawMessage
	// Checkpoint, a JSON object, replaces the lease's checkpoint; nil
	// keeps it (docs/contract.md §8).
	Checkpoint json.RawMessage
	// Principal is the authenticated caller; it must be the holding's.
	Principal string
	// Session, if set, renews through that session: the holding must be
	// held through it at its epoch, or the renew is ErrLost. Without it,
	// renewing a holding held through a session is ErrSessionHeld.
	Session *SessionRef
}

// ReleaseRequest ends a holding (docs/contract.md §3 release).
type ReleaseRequest struct {
	// Name is the lease name.
	Name string
	// Holder is the caller's identity.
	Holder string
	// FencingToken is the token of the caller's holding.
	FencingToken int64
	// Checkpoint, a JSON object, replaces the lease's checkpoint; nil
	// keeps it.
	Checkpoint json.RawMessage
	// Principal is the authenticated caller; it must be the holding's.
	Principal string
	// Session, if set, releases through that session: the holding must be
	// held through it at its epoch, or the release is ErrLost. A release
	// without it ends a session-held holding too.
	Session *SessionRef
}

// Acquire makes req.Holder the holder of req.Name, or refuses with a
// *HeldError while another holder holds it. With req.Wait > 0 it first waits,
// up to req.Wait, for the other holding to end.
func (m *Manager) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	md, err := m.checkAcquire(req)
	if err != nil {
		return Lease{}, err
	}
	if req.Wait == 0 {
		return m.acquireOnce(ctx, req, md, nil)
	}
	return m.acquireWaiting(ctx, req, md)
}

// acquireOnce makes one attempt at an acquire whose request is valid. With
// reg, a refusal first registers (or keeps) the request as a candidate and
// a success takes it out of the candidates.
func (m *Manager) acquireOnce(ctx context.Context, req AcquireRequest, md []byte, reg *registration) (Lease, error) {
	if req.OnAttempt != nil {
		req.OnAttempt()
	}
	in := acquireInput{req: req, md: md, reg: reg, maxCandidates: m.cfg.MaxCandidates}
	var prev *Record
	var refusal error
	snap, err := m.loop.Update(ctx, req.Name, func(s Snapshot) (*Record, error) {
		at := in
		if reg != nil {
			at.waitLeft = time.Until(reg.deadline)
		}
		prev = existing(s.Record)
		next, r := decideAcquire(s.Record, at, decisionTime(s))
		if next == nil {
			refusal = nil
			return nil, r
		}
		refusal = r // registered now; refused once that is written
		return next, nil
	})
	if err == nil && refusal != nil {
		err = refusal
	}
	if err != nil {
		return Lease{}, opError("acquire", req.Name, err)
	}
	l := view(snap.Record, decisionTime(snap))
	if prev == nil || prev.FencingToken != l.FencingToken { // a new holding
		ev := Event{Type: EventAcquired, Lease: l, Time: l.ServerTime}
		if prev != nil {
			ev.PreviousHolder = prev.Holder
			ev.PreviousExpired = !Released(prev)
			ev.Previous = view(prev, l.ServerTime)
		}
		m.changed(ev)
	}
	return l, nil
}

// Renew extends the caller's live holding; anything else is ErrLost.
func (m *Manager) Renew(ctx context.Context, req RenewRequest) (Lease, error) {
	md, cp, err := m.checkRenew(req)
	if err != nil {
		return Lease{}, err
	}
	snap, err := m.loop.Update(ctx, req.Name, func(s Snapshot) (*Record, error) {
		return decideRenew(s.Record, req, md, cp, decisionTime(s))
	})
	if err != nil {
		return Lease{}, opError("renew", req.Name, err)
	}
	return view(snap.Record, decisionTime(snap)), nil
}

// Release ends the caller's holding now. Repeating it, or releasing a
// holding of the caller's that already expired, succeeds and changes
// nothing while nobody has acquired since; anything else is ErrLost.
func (m *Manager) Release(ctx context.Context, req ReleaseRequest) (Lease, error) {
	cp, err := checkRelease(req)
	if err != nil {
		return Lease{}, err
	}
	return m.end(ctx, "release", req.Name, endRequest{holder: req.Holder, principal: req.Principal, token: req.FencingToken,
		checkpoint: cp, session: req.Session})
}

// end ends the caller's holding of name now (decideEnd), for Release,
// Transfer (e.to set) and ExpireSession, and reports a released event
// when it did.
func (m *Manager) end(ctx context.Context, op, name string, e endRequest) (Lease, error) {
	ended := false
	snap, err := m.loop.Update(ctx, name, func(s Snapshot) (*Record, error) {
		var next *Record
		var err error
		next, ended, err = decideEnd(s.Record, e, decisionTime(s))
		return next, err
	})
	if err != nil {
		return Lease{}, opError(op, name, err)
	}
	l := view(snap.Record, decisionTime(snap))
	if ended {
		m.changed(Event{Type: EventReleased, Lease: l, Time: l.ServerTime, Successor: e.to, Reason: e.reason})
	}
	return l, nil
}

// Get returns the lease under name, held or not, or ErrNotFound.
func (m *Manager) Get(ctx context.Context, name string) (Lease, error) {
	var v violations
	checkName(&v, name)
	if err := v.err(); err != nil {
		return Lease{}, err
	}
	snap, err := m.loop.Get(ctx, name)
	if err != nil {
		return Lease{}, opError("get", name, err)
	}
	l, err := decideGet(snap.Record, decisionTime(snap))
	if err != nil {
		return Lease{}, fmt.Errorf("lease: get %q: %w", name, err)
	}
	return l, nil
}

// Ping reports whether the backend answers.
func (m *Manager) Ping(ctx context.Context) error {
	if err := m.loop.Ping(ctx); err != nil {
		return fmt.Errorf("lease: ping backend: %w", err)
	}
	return nil
}

// Released reports whether r's holding was ended by a release rather than
// by running out: a release sets ExpireTime before RenewTime + TTL, while
// acquire and renew set it to exactly that.
func Released(r *Record) bool {
	return r.ExpireTime.Before(r.RenewTime.Add(r.TTL))
}

// decisionTime is the server time of a snapshot at the microsecond
// precision that every backend stores.
func decisionTime(s Snapshot) time.Time {
	return s.ServerTime.Truncate(time.Microsecond)
}

// opError adds the operation and lease name to err. Context errors pass
// through unwrapped; the sentinels stay reachable through errors.Is.
func opError(op, name string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("lease: %s %q: %w", op, name, err)
}
