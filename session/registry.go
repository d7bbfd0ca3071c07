package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
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
	ending    int           // sessions in phaseEnding: they left byKey, their end is writing
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

// finishEnd uncounts a session whose end is written (phaseGone): Shutdown
// waits for the sessions registered and for the ends still writing.
func (r *Registry) finishEnd() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ending--
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

// register makes s the session of its key on this instance (evRegistered:
// phaseOpening to phaseLive), ends a session of the same key it replaces
// (resumed here: that one moved) and starts s's death timer and renewals.
// attach, under s's lock, queues the answer. A session of the key at a
// higher epoch already here wins (docs/contract.md §14, S1): s is not
// registered and register returns a *ConflictError.
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
	eff := s.step(event{kind: evRegistered, conn: c, queue: attach})
	s.mu.Unlock()
	r.byKey[s.key] = s
	for _, n := range eff.track {
		r.trackLocked(n, s)
	}
	eff.track = nil
	r.mu.Unlock()
	if old != nil {
		_, _ = old.event(context.Background(), event{kind: evMovedOn})
	}
	return s.carryOut(context.Background(), eff)
}

// leave forgets s, whose end began (effLeave), and the leases hs it held,
// and counts its end as writing until finishEnd.
func (r *Registry) leave(s *Session, hs []held) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey[s.key] == s {
		delete(r.byKey, s.key)
	}
	for _, h := range hs {
		r.untrackLocked(h.name, s)
	}
	r.ending++
	r.giveBack(s.caller)
	r.observe(func(o Observer) { o.SessionsOpen(-1) })
}

// trackAll routes the events of the leases names to s.
func (r *Registry) trackAll(names []string, s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		r.trackLocked(n, s)
	}
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
		s.refuse()
		return nil, "", fmt.Errorf("session: writing the session record: %w", err)
	}
	s.record = held{name: l.Name, holder: l.Holder, token: l.FencingToken, sent: sent}
	_ = r.register(s, c, nil) // a new key: nothing here to conflict with
	r.cfg.Audit.Session(ctx, "session_open", "ok", principal, s.ShortKey(), "")
	return s, id, nil
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
		s.Move(MoveShutdown)
	}
	for {
		r.mu.Lock()
		n, ch := len(r.byKey)+r.ending, r.changed
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
				_, _ = left[i].event(end, event{kind: evShutdown})
			})
			r.cfg.Logger.Info("sessions: shutdown grace over", "left", len(left))
			return
		}
	}
}
