package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// Registry holds the sessions this instance owns. It is safe for
// concurrent use.
type Registry struct {
	b   Backend
	cfg Config

	mu        sync.Mutex
	byKey     map[string]*Session
	perCaller map[string]int                   // slots held by sessions and sockets
	spare     map[string]int                   // spare slots of sockets (Slot)
	names     map[string]map[*Session]struct{} // lease name → the sessions holding it here
	closing   bool
	ending    atomic.Int64  // sessions whose end is still writing
	changed   chan struct{} // closed and replaced whenever a session leaves or finishes ending
	stopHub   func()
}

// New returns a Registry over b. It follows cfg.Events until Stop.
func New(b Backend, cfg Config) (*Registry, error) {
	if b == nil {
		return nil, errors.New("session: New: Backend is nil")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Registry{b: b, cfg: cfg, byKey: map[string]*Session{}, perCaller: map[string]int{}, spare: map[string]int{},
		names: map[string]map[*Session]struct{}{}, changed: make(chan struct{}), stopHub: func() {}}
	if cfg.Events != nil {
		r.stopHub = r.follow()
	}
	return r, nil
}

// Config returns the Registry's configuration with defaults filled in.
func (r *Registry) Config() Config { return r.cfg }

// Stop stops following events. Sessions are left as they are.
func (r *Registry) Stop() { r.stopHub() }

// Len is the number of sessions this instance owns.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byKey)
}

func (r *Registry) observe(f func(Observer)) {
	if r.cfg.Observer != nil {
		f(r.cfg.Observer)
	}
}

// CheckWindow returns a *WindowError when w is outside 200ms … 60s or not
// whole milliseconds.
func CheckWindow(w time.Duration) error {
	if w < MinWindow || w > MaxWindow || w%time.Millisecond != 0 {
		return &WindowError{Window: w}
	}
	return nil
}

// reserve takes a session slot for caller, or returns a *LimitError.
// replacing is the key of the session a resume takes over ("" for an
// open): when that session lives here for the same caller, its slot is
// given back as the resume registers, so the limits do not refuse it.
// With sl (the slot the socket took at its upgrade), the slot passes to
// the session instead.
func (r *Registry) reserve(sl *Slot, caller, replacing string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.byKey[replacing]
	moving := replacing != "" && old != nil && old.caller == caller
	switch {
	case r.closing:
		return ErrShuttingDown
	case sl != nil:
		return sl.pass(moving)
	case moving:
	case r.perCaller[caller] >= r.cfg.MaxPerCaller:
		return &LimitError{What: "sessions of this caller", Max: r.cfg.MaxPerCaller}
	case r.slots() >= r.cfg.MaxSessions:
		return &LimitError{What: "sessions of this instance", Max: r.cfg.MaxSessions}
	}
	r.perCaller[caller]++
	return nil
}

// slots is the number of session slots taken; r.mu held.
func (r *Registry) slots() int {
	n := 0
	for _, c := range r.perCaller {
		n += c
	}
	return n
}

// unreserve gives back caller's slot.
func (r *Registry) unreserve(caller string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.giveBack(caller)
}

// beginEnd counts a session whose end is writing; finishEnd uncounts it.
// Shutdown waits for both the sessions and their ends.
func (r *Registry) beginEnd() {
	// An atomic, not r.mu: beginEnd runs under a session's lock, and the
	// registry takes session locks under r.mu (register).
	r.ending.Add(1)
}

func (r *Registry) finishEnd() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ending.Add(-1)
	close(r.changed)
	r.changed = make(chan struct{})
}

// giveBack gives back caller's slot; r.mu held.
func (r *Registry) giveBack(caller string) {
	if r.perCaller[caller]--; r.perCaller[caller] <= 0 {
		delete(r.perCaller, caller)
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// newSession makes a live session; its loops start in register.
func (r *Registry) newSession(key, principal, caller string, window time.Duration, epoch int64) *Session {
	s := &Session{r: r, key: key, principal: principal, caller: caller, window: window, ttl: r.cfg.TTL(window),
		recordTTL: r.cfg.RecordTTL(window), clock: r.cfg.Clock,
		stop: make(chan struct{}), epoch: epoch, leases: map[string]*held{}, lastRecv: r.cfg.Clock.Now()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// register makes s the session of its key on this instance, ends a session
// of the same key it replaces (resumed here: that one moved) and starts
// s's death timer and renewals. A session of the key at a higher epoch
// already here wins (docs/contract.md §14, S1): s is not registered and
// register returns a *ConflictError.
func (r *Registry) register(s *Session, c Conn, attach func()) error {
	r.mu.Lock()
	old := r.byKey[s.key]
	if old != nil {
		if e := old.Epoch(); e > s.epoch {
			r.mu.Unlock()
			return &ConflictError{Epoch: e}
		}
	}
	// Nothing can push to s before it is in byKey and its leases are
	// tracked, both below: what attach queues (the resumed answer) is the
	// first message of the socket about s (docs/contract.md §14, S6).
	s.mu.Lock()
	s.conn = c
	s.lastRecv = s.clock.Now() // the resume that made it owner counts as a message (S3)
	s.death = s.clock.AfterFunc(s.window, s.watchDeath)
	if attach != nil {
		attach()
	}
	names := make([]string, 0, len(s.leases))
	for n := range s.leases {
		names = append(names, n)
	}
	s.mu.Unlock()
	r.byKey[s.key] = s
	for _, n := range names {
		r.trackLocked(n, s)
	}
	r.mu.Unlock()
	if old != nil {
		_ = old.end(context.Background(), endMoved)
	}
	r.observe(func(o Observer) { o.SessionsOpen(1) })
	s.startRenewals()
	return nil
}

// unregister forgets s (ended) and the leases hs it held.
func (r *Registry) unregister(s *Session, hs []held) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey[s.key] == s {
		delete(r.byKey, s.key)
	}
	for _, h := range hs {
		r.untrackLocked(h.name, s)
	}
	r.giveBack(s.caller)
	r.observe(func(o Observer) { o.SessionsOpen(-1) })
}

func (r *Registry) track(name string, s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trackLocked(name, s)
}

func (r *Registry) trackLocked(name string, s *Session) {
	if r.names[name] == nil {
		r.names[name] = map[*Session]struct{}{}
	}
	r.names[name][s] = struct{}{}
}

func (r *Registry) untrack(name string, s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.untrackLocked(name, s)
}

func (r *Registry) untrackLocked(name string, s *Session) {
	delete(r.names[name], s)
	if len(r.names[name]) == 0 {
		delete(r.names, name)
	}
}

// Open opens a session of window for principal (caller is the key its
// per-caller limit counts: the principal, or the client address without
// authentication). It writes the session record and returns the session
// and its id, the bearer secret only the agent keeps.
func (r *Registry) Open(ctx context.Context, caller, principal string, window time.Duration, c Conn) (*Session, string, error) {
	return r.open(ctx, nil, caller, principal, window, c)
}

// open is Open, on the socket's slot sl when it is not nil.
func (r *Registry) open(ctx context.Context, sl *Slot, caller, principal string, window time.Duration, c Conn) (*Session, string, error) {
	if err := CheckWindow(window); err != nil {
		return nil, "", err
	}
	if err := r.reserve(sl, caller, ""); err != nil {
		r.refused(ctx, "session_open", principal, "", err)
		return nil, "", err
	}
	id := newID()
	key := Key(id)
	s := r.newSession(key, principal, caller, window, 1)
	md, _ := json.Marshal(map[string]int64{"windowMs": window.Milliseconds()})
	sent := s.clock.Now()
	l, err := r.b.Acquire(ctx, s.ref(), lease.AcquireRequest{Name: RecordName(key), Holder: recordHolder, Principal: principal, TTL: s.recordTTL, Metadata: md})
	if err != nil {
		r.unreserve(caller)
		return nil, "", fmt.Errorf("session: writing the session record: %w", err)
	}
	s.record = held{name: l.Name, holder: l.Holder, token: l.FencingToken, sent: sent}
	_ = r.register(s, c, nil) // a new key: nothing here to conflict with
	r.cfg.Audit.Session(ctx, "session_open", "ok", principal, s.ShortKey(), "")
	return s, id, nil
}

// Resume takes the session id over on this instance for principal at
// exactly epoch, the epoch the agent proposes (docs/contract.md §14, A1 and
// S1): first the session record, whose stored epoch must be lower, then
// each claimed lease, likewise. A record or a claimed lease found at epoch
// or above means a later resume of the agent owns the session: a
// *ConflictError (ErrConflict), and nothing is registered. It returns the
// leases taken over and those that were lost, with the reasons the failed
// takeovers found. window 0 keeps the session's.
//
// The answer, made by answer (nil: none), is queued as the session
// attaches to c, before anything else about it can be (S6); a lease whose
// takeover was answered too late is written once more first, and one not
// safe for a window beyond that moment even then is answered lost
// (expired) and ended (S5).
func (r *Registry) Resume(ctx context.Context, caller, principal, id string, epoch int64, window time.Duration, claims []Claim, c Conn, answer ResumeAnswer) (*Session, []lease.Lease, []Lost, error) {
	return r.resume(ctx, nil, caller, principal, id, epoch, window, claims, c, answer)
}

// ResumeAnswer makes the answer to a resume of s that took leases over,
// outside the session's lock (it may sign proofs), and returns what
// queues it with the leases and losses finally answered; that runs under
// the session's lock as the session attaches to its socket.
type ResumeAnswer func(s *Session, taken []lease.Lease) (queue func(leases []lease.Lease, lost []Lost))

// MaxEpochJump is how far above the session's epoch a resume may propose
// (docs/contract.md §14, Operations in flight): a session can always be
// resumed again, below lease.MaxToken.
const MaxEpochJump = 1_000_000

// EpochError is a resume proposing an epoch more than MaxEpochJump above
// the session's, or above lease.MaxToken (400 invalid_argument).
type EpochError struct{ Max int64 }

func (e *EpochError) Error() string {
	return fmt.Sprintf("session: the proposed epoch must be at most %d", e.Max)
}

// resume is Resume, on the socket's slot sl when it is not nil.
func (r *Registry) resume(ctx context.Context, sl *Slot, caller, principal, id string, epoch int64, window time.Duration, claims []Claim, c Conn, answer ResumeAnswer) (*Session, []lease.Lease, []Lost, error) {
	fail := func(err error) (*Session, []lease.Lease, []Lost, error) {
		r.refused(ctx, "session_resume", principal, "", err)
		return nil, nil, nil, err
	}
	if window != 0 {
		if err := CheckWindow(window); err != nil {
			return nil, nil, nil, err
		}
	}
	if len(claims) > r.cfg.MaxLeases {
		return fail(&LimitError{What: "leases of this session", Max: r.cfg.MaxLeases})
	}
	if !validID(id) {
		return fail(ErrNotFound)
	}
	key := Key(id)
	rec, err := r.b.Get(ctx, RecordName(key))
	switch {
	case errors.Is(err, lease.ErrNotFound):
		return fail(ErrNotFound)
	case err != nil:
		return nil, nil, nil, fmt.Errorf("session: reading the session record: %w", err)
	}
	l := rec.Lease
	if rec.Key != key || l.Holder != recordHolder || l.Principal != principal || l.Revoked() || l.Released() {
		return fail(ErrNotFound)
	}
	if epoch <= rec.Epoch {
		return fail(&ConflictError{Epoch: rec.Epoch})
	}
	if limit := min(rec.Epoch+MaxEpochJump, lease.MaxToken); epoch > limit {
		return fail(&EpochError{Max: limit})
	}
	if window == 0 {
		window = rec.Window
		if CheckWindow(window) != nil {
			window = DefaultWindow
		}
	}
	if err := r.reserve(sl, caller, key); err != nil {
		return fail(err)
	}
	s := r.newSession(key, principal, caller, window, epoch)
	ref := s.ref()
	sent := s.clock.Now()
	got, err := r.b.TakeOver(ctx, ref, TakeOver{Name: l.Name, Holder: recordHolder, Principal: principal, FencingToken: l.FencingToken, TTL: s.recordTTL})
	if err != nil {
		r.unreserve(caller)
		var le *lease.LostError
		switch {
		case errors.As(err, &le) && le.Reason == lease.LostMoved:
			return fail(&ConflictError{Epoch: le.Epoch})
		case errors.Is(err, lease.ErrLost):
			return fail(ErrNotFound) // released, revoked or taken since the read
		}
		return nil, nil, nil, fmt.Errorf("session: taking the session record over: %w", err)
	}
	s.record = held{name: got.Name, holder: got.Holder, token: got.FencingToken, sent: sent}
	if window != rec.Window {
		// The record's metadata tells the window: write the new one. The
		// session's window on the backend is already the new one (the
		// takeover wrote it), so a failure here only leaves the metadata
		// stale.
		md, _ := json.Marshal(map[string]int64{"windowMs": window.Milliseconds()})
		sent := s.clock.Now()
		if _, err := r.b.Renew(ctx, ref, lease.RenewRequest{Name: got.Name, Holder: got.Holder, FencingToken: got.FencingToken, TTL: s.recordTTL, Principal: principal, Metadata: md}); err == nil {
			s.record.sent = sent
		} else {
			r.cfg.Logger.Warn("session: resume could not write the session record's window", "session", s.ShortKey(), "err", err)
		}
	}
	taken := make([]lease.Lease, len(claims))
	errs := make([]error, len(claims))
	sent = s.clock.Now()
	r.fanOutIdx(len(claims), func(i int) {
		cl := claims[i]
		taken[i], errs[i] = r.b.TakeOver(ctx, ref, TakeOver{Name: cl.Name, Holder: cl.Holder, Principal: principal, FencingToken: cl.FencingToken, TTL: s.ttl})
	})
	var leases []lease.Lease
	var lost []Lost
	for i, cl := range claims {
		var le *lease.LostError
		switch {
		case errs[i] == nil:
			leases = append(leases, taken[i])
			s.leases[cl.Name] = &held{name: cl.Name, holder: cl.Holder, token: taken[i].FencingToken, sent: sent, since: taken[i].RenewTime}
		case errors.As(errs[i], &le) && le.Reason == lease.LostMoved:
			// A later resume took this lease: it owns the session.
			r.unreserve(caller)
			return fail(&ConflictError{Epoch: le.Epoch})
		case le != nil:
			lost = append(lost, Lost{Name: cl.Name, FencingToken: cl.FencingToken, Reason: le.Reason})
		default:
			if !errors.Is(errs[i], lease.ErrLost) {
				r.cfg.Logger.Warn("session: resume could not take a lease over", "session", s.ShortKey(), "lease", cl.Name, "err", errs[i])
			}
			lost = append(lost, Lost{Name: cl.Name, FencingToken: cl.FencingToken, Reason: LostExpired})
		}
	}
	if leases, err = r.safeAnswers(ctx, s, ref, leases, &lost); err != nil {
		r.unreserve(caller)
		return fail(err)
	}
	var queue func([]lease.Lease, []Lost)
	if answer != nil {
		queue = answer(s, leases)
	}
	var unsafe []lease.Lease
	attach := func() { // s.mu held: the last check of S5, and the answer (S6)
		now := s.clock.Now()
		ok := leases[:0:0]
		for _, l := range leases {
			if h := s.leases[l.Name]; h != nil && s.safeFor(h.sent, now) {
				ok = append(ok, l)
				continue
			}
			delete(s.leases, l.Name)
			unsafe = append(unsafe, l)
			lost = append(lost, Lost{Name: l.Name, FencingToken: l.FencingToken, Reason: LostExpired})
		}
		leases = ok
		if queue != nil {
			queue(leases, lost)
		}
	}
	if err := r.register(s, c, attach); err != nil {
		r.unreserve(caller)
		return fail(err)
	}
	for _, l := range unsafe {
		s.expireUnanswered(ctx, ref, l)
	}
	r.observe(func(o Observer) { o.Resume() })
	r.cfg.Audit.Session(ctx, "session_resume", "ok", principal, s.ShortKey(), "")
	return s, leases, lost, nil
}

// refused writes the audit line of a refused open or resume.
func (r *Registry) refused(ctx context.Context, action, principal, short string, err error) {
	outcome := "refused"
	var limit *LimitError
	switch {
	case errors.As(err, &limit):
		outcome = "resource_exhausted"
	case errors.Is(err, ErrNotFound):
		outcome = "session_not_found"
	case errors.Is(err, ErrConflict):
		outcome = "session_conflict"
	case errors.Is(err, ErrShuttingDown):
		outcome = "unavailable"
	}
	r.cfg.Audit.Session(ctx, action, outcome, principal, short, err.Error())
}

// fanOut runs f on every holding, at most 64 at once, and waits.
func (r *Registry) fanOut(hs []held, f func(held)) {
	r.fanOutIdx(len(hs), func(i int) { f(hs[i]) })
}

// fanOutIdx runs f(0) … f(n-1), at most 64 at once, and waits.
func (r *Registry) fanOutIdx(n int, f func(int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// Shutdown asks every socket to move (make before break) and waits, until
// ctx is done, for every session to leave: moved elsewhere (its renewal's
// compare-and-set fails, or its socket closed and its window passed:
// ending it then finds the epoch moved on) or dead. Then it ends the
// sessions that neither moved nor sent a message within their window
// (compare-and-set on the epoch, so a moved one is never touched) and
// leaves those still heartbeating: their leases run out at the session
// TTL. Ending them takes at most 5 s, and stops when end is done (the
// process's own shutdown budget). It opens no session after it starts.
func (r *Registry) Shutdown(ctx, end context.Context) {
	r.mu.Lock()
	r.closing = true
	all := make([]*Session, 0, len(r.byKey))
	for _, s := range r.byKey {
		all = append(all, s)
	}
	r.mu.Unlock()
	for _, s := range all {
		s.push(Push{Type: PushMove, Reason: MoveShutdown})
	}
	for {
		r.mu.Lock()
		n, ch := len(r.byKey)+int(r.ending.Load()), r.changed
		r.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			r.mu.Lock()
			left := make([]*Session, 0, len(r.byKey))
			for _, s := range r.byKey {
				left = append(left, s)
			}
			r.mu.Unlock()
			end, cancel := context.WithTimeout(end, 5*time.Second)
			defer cancel()
			r.fanOutIdx(len(left), func(i int) {
				_ = left[i].endIfIdle(end, endShutdown)
			})
			r.cfg.Logger.Info("sessions: shutdown grace over", "left", len(left))
			return
		}
	}
}

// Move asks the session's socket to move (max age).
func (s *Session) Move(reason string) { s.push(Push{Type: PushMove, Reason: reason}) }
