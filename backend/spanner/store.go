package spanner

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/iterator"

	"github.com/leasesvc/leasesvc/backend"
)

// DefaultMaxAttempts is how many read-write transactions an Update runs, at
// most, when they keep losing races; see WithMaxAttempts.
const DefaultMaxAttempts = backend.DefaultMaxAttempts

// Store is a backend.Store over one Cloud Spanner database with the table of
// schema.sql. The zero value is not usable; call New. A Store is safe for
// concurrent use.
type Store struct {
	client  *spanner.Client
	cfg     config
	retries atomic.Int64
	batch   *batcher // nil when batching is off (WithBatchMax(1))

	txns, batched, splits atomic.Int64 // counts of the batcher (see BatchStats)
}

var _ backend.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*config)

type config struct {
	fastPath    FastPath
	serial      bool
	maxAttempts int
	onRetry     func(reason string)
	commitDelay time.Duration
	batchMax    int
}

// WithFastPath sets when an Update reads before its read-write transaction;
// default FastPathAdaptive.
func WithFastPath(m FastPath) Option { return func(c *config) { c.fastPath = m } }

// WithSerialTransactions makes an Update run one read-write transaction at a
// time in this process, whatever the lease name, instead of one per name.
// Default off. Turn it on against the emulator, which runs one read-write
// transaction at a time and fails the one a newcomer interrupts: without it
// concurrent updates of different leases keep failing each other there.
func WithSerialTransactions(on bool) Option { return func(c *config) { c.serial = on } }

// WithMaxAttempts bounds how many times an Update runs its read-write
// transaction when it loses races (n ≥ 1; default DefaultMaxAttempts);
// after that it returns an error wrapping backend.ErrConflict. The
// request's context bounds the retries as well.
func WithMaxAttempts(n int) Option { return func(c *config) { c.maxAttempts = n } }

// WithRetryHook makes an Update call f, synchronously, each time it retries
// a read-write transaction, with the reason (RetryAborted,
// RetryEmulatorInvalidTransaction, RetryEmulatorTransactionNotFound,
// RetryEmulatorTransactionEnded), for a metric. f must be safe for
// concurrent use and must not block.
func WithRetryHook(f func(reason string)) Option { return func(c *config) { c.onRetry = f } }

// MaxCommitDelayLimit is the longest commit delay Spanner accepts (see
// WithMaxCommitDelay).
const MaxCommitDelayLimit = 500 * time.Millisecond

// WithMaxCommitDelay asks Spanner to delay each read-write transaction's
// commit by up to d (0 ≤ d ≤ MaxCommitDelayLimit; 0, the default, asks for
// nothing): throughput-optimized writes, where Spanner groups the commits
// that arrive within d into fewer rounds of replication. Each write may
// then take up to d longer; see docs/spanner.md.
func WithMaxCommitDelay(d time.Duration) Option { return func(c *config) { c.commitDelay = d } }

// WithBatchMax sets how many operations on distinct leases one read-write
// transaction may carry (1 ≤ n ≤ BatchMaxLimit; default DefaultBatchMax).
// The attempts that arrive while a transaction is in flight join the next
// one, up to n; an attempt on an idle Store starts at once. 1 turns
// batching off: every attempt is its own transaction, as many in flight as
// the Loop lets through. See docs/spanner.md.
func WithBatchMax(n int) Option { return func(c *config) { c.batchMax = n } }

// New returns a Store over client, whose database must have the table of
// schema.sql (see Migrate and CheckSchema). The caller keeps ownership of
// client and closes it after the Store's last use. New does no I/O.
func New(client *spanner.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("spanner: New: client is nil")
	}
	c := config{fastPath: FastPathAdaptive, maxAttempts: DefaultMaxAttempts, batchMax: DefaultBatchMax}
	for _, o := range opts {
		o(&c)
	}
	if _, err := ParseFastPath(c.fastPath.String()); err != nil {
		return nil, fmt.Errorf("spanner: New: WithFastPath(%v) is not a mode", c.fastPath)
	}
	if c.maxAttempts < 1 {
		return nil, fmt.Errorf("spanner: New: WithMaxAttempts(%d) must be at least 1", c.maxAttempts)
	}
	if c.commitDelay < 0 || c.commitDelay > MaxCommitDelayLimit {
		return nil, fmt.Errorf("spanner: New: WithMaxCommitDelay(%v) must be within 0–%v", c.commitDelay, MaxCommitDelayLimit)
	}
	if c.batchMax < 1 || c.batchMax > BatchMaxLimit {
		return nil, fmt.Errorf("spanner: New: WithBatchMax(%d) must be within 1–%d", c.batchMax, BatchMaxLimit)
	}
	s := &Store{client: client, cfg: c}
	if c.batchMax > 1 {
		s.batch = &batcher{s: s, max: c.batchMax}
	}
	return s, nil
}

// Hints implements backend.Hinter: the fast path, the serial transactions
// of the emulator, the bound on attempts, and the retry count and hook.
// With batching on, the Loop lets one attempt per lease through (its
// per-name gate), never one for all leases: the batcher itself runs one
// transaction at a time, which is what the emulator needs, and the
// attempts waiting for it are what it batches.
func (s *Store) Hints() backend.Hints {
	return backend.Hints{
		ReadFirst: s.cfg.fastPath, OneAtATime: s.cfg.serial && s.batch == nil, MaxAttempts: s.cfg.maxAttempts,
		OnRetry: func(reason string) {
			s.retries.Add(1)
			if s.cfg.onRetry != nil {
				s.cfg.onRetry(reason)
			}
		},
	}
}

// BatchStats returns what the batcher has done since the Store was
// created: the attempts it ran, the read-write transactions that carried
// them (a batch that was split counts one more per attempt run alone), and
// how many batches were split. All zero when batching is off.
func (s *Store) BatchStats() (attempts, transactions, splits int64) {
	return s.batched.Load(), s.txns.Load(), s.splits.Load()
}

// Retries returns how many times an Update has retried a read-write
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
		return backend.Snapshot{}, classify(fmt.Sprintf("get %q", name), err)
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

// Try implements backend.Store with one read-write transaction: it reads
// the row with CURRENT_TIMESTAMP(), calls decide with that time and buffers
// the write. Spanner's locks make the read and the write one serializable
// step. A transaction that lost a race (Aborted, and what the emulator
// answers instead; see classify) is an error wrapping backend.ErrConflict.
// With batching on (WithBatchMax), the transaction may be shared with the
// attempts on other leases that arrived while the previous one was in
// flight; each still gets its own answer, as if alone.
func (s *Store) Try(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return backend.Snapshot{}, err
	}
	if s.batch != nil {
		return s.batch.do(ctx, name, decide)
	}
	return s.attempt(ctx, name, decide)
}

// attempt runs one attempt alone in its own read-write transaction.
func (s *Store) attempt(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	snap, decideErr, err := s.transact(ctx, name, decide)
	switch {
	case decideErr != nil:
		return snap, decideErr
	case err != nil:
		return backend.Snapshot{}, classify(fmt.Sprintf("update %q", name), err)
	}
	return snap, nil
}

// transact runs one read-write transaction (the client may run its function
// more than once after Aborted). decideErr is decide's error, exactly as
// decide returned it; err is any other failure.
func (s *Store) transact(ctx context.Context, name string, decide backend.Decide) (snap backend.Snapshot, decideErr, err error) {
	_, err = s.client.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		decideErr = nil
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
		snap.Record = written
		return nil
	}, s.txOptions())
	if decideErr != nil && err != nil {
		return snap, decideErr, nil // the client may have wrapped it; return it as decide did
	}
	return snap, nil, err
}

// txOptions returns the options of every read-write transaction: the
// commit delay of WithMaxCommitDelay, if any.
func (s *Store) txOptions() spanner.TransactionOptions {
	var o spanner.TransactionOptions
	if d := s.cfg.commitDelay; d > 0 {
		o.CommitOptions.MaxCommitDelay = &d
	}
	return o
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
		rec, err := r.record()
		if err != nil {
			return err
		}
		recs = append(recs, *rec)
		return nil
	})
	var at time.Time
	if err == nil {
		at, err = ro.Timestamp()
	}
	if err != nil {
		return nil, time.Time{}, classify(fmt.Sprintf("list %q", prefix), err)
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
	return classify("ping", err)
}
