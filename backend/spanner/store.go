package spanner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/iterator"

	"github.com/leasesvc/leasesvc/backend"
)

// DefaultMaxAttempts is how many times Update runs its read-write
// transaction, at most, when it keeps losing races; see WithMaxAttempts.
const DefaultMaxAttempts = 50

// Store is a backend.Store over one Cloud Spanner database with the table of
// schema.sql. The zero value is not usable; call New. A Store is safe for
// concurrent use.
type Store struct {
	client      *spanner.Client
	fastPath    FastPath
	serial      bool
	maxAttempts int
	onRetry     func(reason string)
	retries     atomic.Int64
	queue       nameQueue
	hints       pathHints
}

var _ backend.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*config)

type config struct {
	fastPath    FastPath
	serial      bool
	maxAttempts int
	onRetry     func(reason string)
}

// WithFastPath sets when Update reads before its read-write transaction;
// default FastPathAdaptive.
func WithFastPath(m FastPath) Option { return func(c *config) { c.fastPath = m } }

// WithSerialTransactions makes Update run one read-write transaction at a
// time in this process, whatever the lease name, instead of one per name.
// Default off. Turn it on against the emulator, which runs one read-write
// transaction at a time and fails the one a newcomer interrupts: without it
// concurrent updates of different leases keep failing each other there.
func WithSerialTransactions(on bool) Option { return func(c *config) { c.serial = on } }

// WithMaxAttempts bounds how many times Update runs its read-write
// transaction when it loses races (n ≥ 1; default DefaultMaxAttempts);
// after that Update returns an error wrapping backend.ErrConflict. The
// request's context bounds the retries as well.
func WithMaxAttempts(n int) Option { return func(c *config) { c.maxAttempts = n } }

// WithRetryHook makes Update call f, synchronously, each time it retries a
// read-write transaction, with the reason (RetryAborted,
// RetryEmulatorInvalidTransaction, RetryEmulatorTransactionNotFound,
// RetryEmulatorTransactionEnded), for a metric. f must be safe for
// concurrent use and must not block.
func WithRetryHook(f func(reason string)) Option { return func(c *config) { c.onRetry = f } }

// New returns a Store over client, whose database must have the table of
// schema.sql (see Migrate and CheckSchema). The caller keeps ownership of
// client and closes it after the Store's last use. New does no I/O.
func New(client *spanner.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("spanner: New: client is nil")
	}
	c := config{fastPath: FastPathAdaptive, maxAttempts: DefaultMaxAttempts}
	for _, o := range opts {
		o(&c)
	}
	if c.fastPath < FastPathAdaptive || c.fastPath > FastPathNever {
		return nil, fmt.Errorf("spanner: New: WithFastPath(%v) is not a mode", c.fastPath)
	}
	if c.maxAttempts < 1 {
		return nil, fmt.Errorf("spanner: New: WithMaxAttempts(%d) must be at least 1", c.maxAttempts)
	}
	return &Store{client: client, fastPath: c.fastPath, serial: c.serial, maxAttempts: c.maxAttempts, onRetry: c.onRetry}, nil
}

// ExpectWrite tells the Store that the next Update of name will likely
// write, so that with FastPathAdaptive it goes straight to its read-write
// transaction even though the last Update of name was refused: package
// lease calls it before the attempt of a waiting acquire that was woken
// (an event said the holding ended, or its expiry came). It only picks the
// path, like every fast-path guess; FastPathAlways and FastPathNever
// ignore it.
func (s *Store) ExpectWrite(name string) { s.hints.record(name, true) }

// Retries returns how many times Update has retried a read-write
// transaction since the Store was created.
func (s *Store) Retries() int64 { return s.retries.Load() }

// Get implements backend.Store with a strong single read. The server time
// is the read's timestamp: the snapshot is the database as of that instant.
func (s *Store) Get(ctx context.Context, name string) (backend.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return backend.Snapshot{}, err
	}
	snap, err := s.strongRead(ctx, name)
	if err != nil {
		_, err = classify(fmt.Sprintf("get %q", name), err)
		return backend.Snapshot{}, settle(ctx, err)
	}
	return snap, nil
}

// strongRead reads the row under name in a single-use strong read-only
// transaction, at the read's timestamp.
func (s *Store) strongRead(ctx context.Context, name string) (backend.Snapshot, error) {
	ro := s.client.Single()
	defer ro.Close()
	rec, _, err := readRow(ctx, ro, name)
	if err != nil {
		return backend.Snapshot{}, err
	}
	at, err := ro.Timestamp()
	if err != nil {
		return backend.Snapshot{}, fmt.Errorf("read timestamp: %w", err)
	}
	return backend.Snapshot{Record: rec, ServerTime: at}, nil
}

// Update implements backend.Store.
//
// On the fast path (see FastPath) decide first runs on a strong single
// read; when it answers without a write (an error, or nil) that is the
// answer and no transaction runs. Otherwise a read-write transaction (one
// per name at a time in this process; see nameQueue) reads the row with
// CURRENT_TIMESTAMP(), calls decide again with that time and buffers the
// write, whose UpdateTime is the commit timestamp. Spanner's locks make the
// read and the write one serializable step. Transactions that lose a race
// (Aborted, and what the emulator answers instead; see classify) run again
// after a capped, jittered exponential backoff, up to WithMaxAttempts times
// or until ctx is done.
func (s *Store) Update(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return backend.Snapshot{}, err
	}
	what := fmt.Sprintf("update %q", name)
	if s.fastPath == FastPathAlways || s.fastPath == FastPathAdaptive && s.hints.readFirst(name) {
		snap, err := s.strongRead(ctx, name)
		if err != nil {
			_, err = classify(what+": read", err)
			return backend.Snapshot{}, settle(ctx, err)
		}
		next, err := decide(snap)
		if err != nil || next == nil {
			s.hints.record(name, false)
			return snap, err // decide's error unchanged
		}
	}
	turn := name
	if s.serial {
		turn = "" // one queue for every name
	}
	release, err := s.queue.acquire(ctx, turn)
	if err != nil {
		return backend.Snapshot{}, err
	}
	defer release()
	for attempt := 0; ; attempt++ {
		snap, wrote, decideErr, err := s.transact(ctx, name, decide)
		if decideErr != nil {
			s.hints.record(name, false)
			return snap, decideErr
		}
		if err == nil {
			s.hints.record(name, wrote)
			return snap, nil
		}
		retry, err := classify(what, err)
		if retry == "" {
			return backend.Snapshot{}, settle(ctx, err)
		}
		if attempt+1 >= s.maxAttempts {
			return backend.Snapshot{}, fmt.Errorf("%w (gave up after %d attempts)", err, attempt+1)
		}
		s.retries.Add(1)
		if s.onRetry != nil {
			s.onRetry(retry)
		}
		if err := sleep(ctx, backoff(attempt, rand.Float64())); err != nil {
			return backend.Snapshot{}, err
		}
	}
}

// transact runs one read-write transaction (the client may run its function
// more than once after Aborted) and reports whether it wrote. decideErr is
// decide's error, exactly as decide returned it; err is any other failure.
func (s *Store) transact(ctx context.Context, name string, decide backend.Decide) (snap backend.Snapshot, wrote bool, decideErr, err error) {
	_, err = s.client.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		decideErr, wrote = nil, false
		rec, now, err := readRow(ctx, tx, name)
		if err != nil {
			return err
		}
		snap = backend.Snapshot{Record: rec, ServerTime: now}
		next, err := decide(snap)
		if err != nil {
			decideErr = err
			return err
		}
		if next == nil {
			return nil
		}
		m, written, err := writeMutation(name, next)
		if err != nil {
			return err
		}
		if err := tx.BufferWrite([]*spanner.Mutation{m}); err != nil {
			return err
		}
		snap.Record, wrote = written, true
		return nil
	})
	if decideErr != nil && err != nil {
		return snap, false, decideErr, nil // the client may have wrapped it; return it as decide did
	}
	return snap, wrote, nil, err
}

// List implements backend.Store with a strong single read that scans the
// primary key range of prefix; the server time is the read's timestamp.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]backend.Record, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, err
	}
	if limit <= 0 {
		return nil, time.Time{}, fmt.Errorf("spanner: list %q: limit %d must be positive", prefix, limit)
	}
	ro := s.client.Single()
	defer ro.Close()
	var recs []backend.Record
	err := ro.Query(ctx, listSQL(prefix, after, limit)).Do(func(row *spanner.Row) error {
		var r leaseRow
		if err := row.ToStruct(&r); err != nil {
			return fmt.Errorf("decode a lease row: %w", err)
		}
		recs = append(recs, *r.record())
		return nil
	})
	var at time.Time
	if err == nil {
		at, err = ro.Timestamp()
	}
	if err != nil {
		_, err = classify(fmt.Sprintf("list %q", prefix), err)
		return nil, time.Time{}, settle(ctx, err)
	}
	return recs, at, nil
}

// Ping implements backend.Store: SELECT 1 in a single-use read.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	it := s.client.Single().Query(ctx, spanner.Statement{SQL: "SELECT 1"})
	defer it.Stop()
	_, err := it.Next()
	if errors.Is(err, iterator.Done) {
		err = errors.New("SELECT 1 returned no row")
	}
	_, err = classify("ping", err)
	return settle(ctx, err)
}
