package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/googleapis/gax-go/v2"
)

// DefaultMaxAttempts is how many attempts Loop.Update makes, at most, while
// they keep losing races, unless Hints.MaxAttempts says otherwise.
const DefaultMaxAttempts = 50

// Bounds of the pause between two attempts after a conflict (capped,
// jittered exponential backoff; see gax.Backoff).
const (
	retryInitial = 2 * time.Millisecond
	retryMax     = 250 * time.Millisecond
)

// Hints is how a Store asks Loop to drive it. The zero value asks for
// nothing special: no read before an attempt, one attempt per name at a
// time, DefaultMaxAttempts.
type Hints struct {
	// ReadFirst says when Loop answers from a Get before an attempt (see
	// ReadFirst). A Store sets it when a read costs much less than an
	// attempt that writes (no transaction, no lock), so that refusals —
	// followers polling a held lease — never contend with its holder.
	ReadFirst ReadFirst
	// OneAtATime makes Loop run one attempt at a time in the process, for
	// every name together, instead of one per name (the Spanner emulator
	// runs one read-write transaction at a time and fails the one a
	// newcomer interrupts).
	OneAtATime bool
	// MaxAttempts bounds the attempts of one Update (≥ 1); 0 means
	// DefaultMaxAttempts.
	MaxAttempts int
	// OnRetry, if set, is called synchronously each time Loop retries an
	// attempt, with the reason (see Conflict); for a metric. It must not
	// block.
	OnRetry func(reason string)
	// MaxBatch is how many attempts on distinct names one transaction of a
	// BatchStore may carry (see BatchStore); 0 or 1 turns batching off.
	// Loop ignores it for a Store that is not a BatchStore. With batching
	// on, one transaction at a time leaves the Loop's batcher (OneAtATime
	// then only keeps the per-name gate); see Batcher for Loops that share
	// one.
	MaxBatch int
	// Batcher, if set, is the group commit the Loop shares with the other
	// Loops given it (see Batcher); nil gives a batching Loop its own.
	// Loop ignores it without batching.
	Batcher *Batcher
}

// LoopOption sets one of the Hints of a Loop, over what the Store declares.
type LoopOption func(*Hints)

// WithHints makes the Loop use h, whatever the Store declares.
func WithHints(h Hints) LoopOption { return func(d *Hints) { *d = h } }

// WithReadFirst sets Hints.ReadFirst.
func WithReadFirst(m ReadFirst) LoopOption { return func(h *Hints) { h.ReadFirst = m } }

// WithOneAtATime sets Hints.OneAtATime.
func WithOneAtATime(on bool) LoopOption { return func(h *Hints) { h.OneAtATime = on } }

// WithMaxAttempts sets Hints.MaxAttempts.
func WithMaxAttempts(n int) LoopOption { return func(h *Hints) { h.MaxAttempts = n } }

// WithRetryHook sets Hints.OnRetry.
func WithRetryHook(f func(reason string)) LoopOption { return func(h *Hints) { h.OnRetry = f } }

// WithMaxBatch sets Hints.MaxBatch.
func WithMaxBatch(n int) LoopOption { return func(h *Hints) { h.MaxBatch = n } }

// WithBatcher sets Hints.Batcher: the Loop batches through b, with the
// other Loops given b.
func WithBatcher(b *Batcher) LoopOption { return func(h *Hints) { h.Batcher = b } }

// Hinter is implemented by a Store that asks Loop for more than the zero
// Hints.
type Hinter interface {
	// Hints returns how the Store wants to be driven. Loop calls it once.
	Hints() Hints
}

// Loop drives a Store: it is the one retry loop of every backend. It adds
// to the driver's single attempt
//
//   - the per-name gate: one attempt per lease name at a time leaves this
//     process (all names together with Hints.OneAtATime), so a hand-over
//     under contention sends one write, not a storm of doomed ones;
//   - the read-first path for refusals (Hints.ReadFirst): decide runs on a
//     Get first, and an answer that writes nothing needs no attempt;
//   - retries of conflicts with a capped, jittered exponential backoff
//     (gax.Backoff), bounded by ctx and Hints.MaxAttempts;
//   - group commit over a BatchStore (Hints.MaxBatch): the attempts that
//     arrive while a transaction is in flight share the next one, each
//     with its own decide and its own answer; a batch that fails as a
//     whole is split into attempts made alone;
//   - settling at ctx's deadline: an error within DeadlineSlack of ctx's
//     deadline waits for ctx and becomes ctx's error, so callers can compare
//     it with ctx.Err().
//
// Loop is safe for concurrent use. Correctness never depends on it: every
// decision is made on a fresh read, and the driver's conditional write
// covers other processes.
type Loop struct {
	store Store
	hints Hints
	gate  gate
	path  pathHints
	batch *batcher // nil without batching
}

// NewLoop returns the Loop over s, driven as s declares (Hinter) and then
// as opts say. With batching on, its batcher is Hints.Batcher when set
// (NewLoop panics if that one serves another store or batch limit), else
// its own.
func NewLoop(s Store, opts ...LoopOption) *Loop {
	l := &Loop{store: s}
	if h, ok := s.(Hinter); ok {
		l.hints = h.Hints()
	}
	for _, o := range opts {
		o(&l.hints)
	}
	if l.hints.MaxAttempts < 1 {
		l.hints.MaxAttempts = DefaultMaxAttempts
	}
	if bs, ok := s.(BatchStore); ok && l.hints.MaxBatch > 1 {
		if sb := l.hints.Batcher; sb != nil {
			l.batch = sb.bind(bs, l.hints.MaxBatch)
		} else {
			l.batch = &batcher{store: bs, max: l.hints.MaxBatch}
		}
	}
	return l
}

// BatchStats returns what the Loop's batcher (with those of the other Loops
// given the same Batcher) has done: the attempts it ran, the transactions
// that carried them (a batch that was split counts one more per attempt
// made alone), and how many batches were split. All zero without batching.
func (l *Loop) BatchStats() (attempts, transactions, splits int64) {
	if l.batch == nil {
		return 0, 0, 0
	}
	return l.batch.attempts.Load(), l.batch.txns.Load(), l.batch.splits.Load()
}

// Store returns the driver the Loop drives.
func (l *Loop) Store() Store { return l.store }

// Get reads the row under name (see Store.Get).
func (l *Loop) Get(ctx context.Context, name string) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	snap, err := l.store.Get(ctx, name)
	return snap, settle(ctx, err)
}

// List lists rows (see Store.List).
func (l *Loop) List(ctx context.Context, prefix, after string, limit int) ([]Row, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, err
	}
	recs, at, err := l.store.List(ctx, prefix, after, limit)
	return recs, at, settle(ctx, err)
}

// Ping reports whether the backend answers.
func (l *Loop) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return settle(ctx, l.store.Ping(ctx))
}

// ExpectWrite says that the next Update of name will likely write, so that
// with ReadFirstAdaptive it goes straight to its attempt even though the
// last Update of name wrote nothing: a waiting acquire woken because the
// holding may have ended. It only picks the path.
func (l *Loop) ExpectWrite(name string) {
	if l.hints.ReadFirst == ReadFirstAdaptive {
		l.path.record(name, true)
	}
}

// Update atomically reads the row under name, calls decide with it and
// the server time of that read, and stores what decide returns, retrying
// lost races until it succeeds, ctx is done or the attempts run out (an
// error wrapping ErrConflict). It returns the snapshot that decide's answer
// produced: the written row and the server time of the decision, or the
// unchanged row if decide returned nil. An error from decide is returned
// unchanged, with nothing written; a context error is ctx's, bare.
func (l *Loop) Update(ctx context.Context, name string, decide Decide) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	if l.readFirst(name) {
		snap, err := l.store.Get(ctx, name)
		if err != nil {
			return Snapshot{}, settle(ctx, err)
		}
		next, err := decide(snap)
		if err != nil || next == nil {
			l.note(name, false)
			return snap, err
		}
	}
	key := name
	if l.hints.OneAtATime && l.batch == nil {
		key = ""
	}
	leave, err := l.gate.enter(ctx, key)
	if err != nil {
		return Snapshot{}, err
	}
	defer leave()
	var (
		wrote     bool
		decideErr error
	)
	tracked := func(s Snapshot) (*Row, error) {
		next, err := decide(s)
		wrote, decideErr = err == nil && next != nil, err
		return next, err
	}
	bo := gax.Backoff{Initial: retryInitial, Max: retryMax, Multiplier: 2}
	for attempt := 1; ; attempt++ {
		snap, err := l.try(ctx, name, tracked)
		switch {
		case err == nil:
			l.note(name, wrote)
			return snap, nil
		case decideErr != nil && err == decideErr:
			l.note(name, false)
			return snap, err
		case !errors.Is(err, ErrConflict) || ctx.Err() != nil:
			return Snapshot{}, settle(ctx, err)
		case attempt >= l.hints.MaxAttempts:
			return Snapshot{}, fmt.Errorf("%w (gave up after %d attempts)", err, attempt)
		}
		if l.hints.OnRetry != nil {
			l.hints.OnRetry(ConflictReason(err))
		}
		if err := sleep(ctx, bo.Pause()); err != nil {
			return Snapshot{}, err
		}
	}
}

// try makes one attempt: in the next batch with batching on, else alone.
func (l *Loop) try(ctx context.Context, name string, decide Decide) (Snapshot, error) {
	if l.batch != nil {
		return l.batch.do(ctx, name, decide)
	}
	return l.store.Try(ctx, name, decide)
}

func (l *Loop) readFirst(name string) bool {
	switch l.hints.ReadFirst {
	case ReadFirstAlways:
		return true
	case ReadFirstAdaptive:
		return l.path.readFirst(name)
	}
	return false
}

func (l *Loop) note(name string, wrote bool) {
	if l.hints.ReadFirst == ReadFirstAdaptive {
		l.path.record(name, wrote)
	}
}

// settle makes an error that comes within DeadlineSlack of ctx's deadline,
// or after ctx is done, ctx's own error (see AwaitDeadline): a server ends
// a call at the deadline it was sent, a moment before ctx's timer fires,
// and the driver may have called that unavailable. Any other error is
// returned as it is.
func settle(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	AwaitDeadline(ctx)
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

// sleep pauses for d or until ctx is done, and returns ctx.Err() then.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Conflict returns err marked as a lost race (errors.Is(_, ErrConflict)),
// with a reason for Hints.OnRetry ("conflict" when empty).
func Conflict(reason string, err error) error {
	if reason == "" {
		reason = "conflict"
	}
	return &conflictError{reason: reason, err: err}
}

// ConflictReason returns the reason of a Conflict error, or "conflict".
func ConflictReason(err error) string {
	var c *conflictError
	if errors.As(err, &c) {
		return c.reason
	}
	return "conflict"
}

type conflictError struct {
	reason string
	err    error
}

func (e *conflictError) Error() string { return fmt.Sprintf("%v: %v", ErrConflict, e.err) }
func (e *conflictError) Unwrap() []error {
	return []error{ErrConflict, e.err}
}

// gate lets one Update per key at a time make its attempts.
type gate struct {
	mu    sync.Mutex
	slots map[string]*slot
}

// slot is the turn of one key: a token in ch means taken.
type slot struct {
	ch   chan struct{}
	refs int // Updates holding or waiting for the slot; guarded by gate.mu
}

// enter waits for the turn of key, or until ctx is done. The caller calls
// leave exactly once.
func (g *gate) enter(ctx context.Context, key string) (leave func(), err error) {
	g.mu.Lock()
	if g.slots == nil {
		g.slots = map[string]*slot{}
	}
	s := g.slots[key]
	if s == nil {
		s = &slot{ch: make(chan struct{}, 1)}
		g.slots[key] = s
	}
	s.refs++
	g.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch; g.drop(key, s) }, nil
	case <-ctx.Done():
		g.drop(key, s)
		return nil, ctx.Err()
	}
}

func (g *gate) drop(key string, s *slot) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.refs--; s.refs == 0 {
		delete(g.slots, key)
	}
}
