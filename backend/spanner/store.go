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

// Store is a backend.Store over one Cloud Spanner database with the table of
// schema.sql. The zero value is not usable; call New. A Store is safe for
// concurrent use.
type Store struct {
	client  *spanner.Client
	cfg     config
	retries atomic.Int64

	txns, batched, splits atomic.Int64 // see BatchStats
}

var _ backend.BatchStore = (*Store)(nil)

// Option configures a Store.
type Option func(*config)

type config struct {
	loop        []backend.LoopOption
	commitDelay time.Duration
	batchMax    int
}

// WithLoop sets how a backend.Loop over the Store drives it, over what the
// Store declares (see Hints): the loop's own settings (backend.WithReadFirst,
// backend.WithOneAtATime, backend.WithMaxAttempts, backend.WithRetryHook),
// which the Store hands to the Loop unchanged and never acts on itself.
// The service's opener does not use it: it returns its settings beside the
// Store (backend.Opened.Loop), for lease.NewManager. A program that makes
// its own Loop may pass them to backend.NewLoop instead.
func WithLoop(opts ...backend.LoopOption) Option {
	return func(c *config) { c.loop = append(c.loop, opts...) }
}

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
// transaction may carry (1 ≤ n ≤ BatchMaxLimit; default DefaultBatchMax),
// the batch limit the Store declares (Hints.MaxBatch): with it, a
// backend.Loop lets the attempts that arrive while a transaction is in
// flight join the next one, up to n; an attempt on an idle Loop starts at
// once. 1 turns batching off: every attempt is its own transaction, as
// many in flight as the Loop lets through. See docs/spanner.md.
func WithBatchMax(n int) Option { return func(c *config) { c.batchMax = n } }

// New returns a Store over client, whose database must have the table of
// schema.sql (see Migrate and CheckSchema). The caller keeps ownership of
// client and closes it after the Store's last use. New does no I/O.
func New(client *spanner.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("spanner: New: client is nil")
	}
	c := config{batchMax: DefaultBatchMax}
	for _, o := range opts {
		o(&c)
	}
	h := backend.Hints{ReadFirst: FastPathAdaptive}
	for _, o := range c.loop {
		o(&h)
	}
	if _, err := ParseFastPath(h.ReadFirst.String()); err != nil {
		return nil, fmt.Errorf("spanner: New: WithLoop(backend.WithReadFirst(%v)) is not a mode", h.ReadFirst)
	}
	if h.MaxAttempts < 0 {
		return nil, fmt.Errorf("spanner: New: WithLoop(backend.WithMaxAttempts(%d)) must be at least 1", h.MaxAttempts)
	}
	if c.commitDelay < 0 || c.commitDelay > MaxCommitDelayLimit {
		return nil, fmt.Errorf("spanner: New: WithMaxCommitDelay(%v) must be within 0–%v", c.commitDelay, MaxCommitDelayLimit)
	}
	if c.batchMax < 1 || c.batchMax > BatchMaxLimit {
		return nil, fmt.Errorf("spanner: New: WithBatchMax(%d) must be within 1–%d", c.batchMax, BatchMaxLimit)
	}
	return &Store{client: client, cfg: c}, nil
}

// Hints implements backend.Hinter. The Store declares the read-first path
// (adaptive: a strong read costs much less than a read-write transaction)
// and its batch limit (WithBatchMax), then applies WithLoop's settings;
// OnRetry also counts the retries (Retries).
func (s *Store) Hints() backend.Hints {
	h := backend.Hints{ReadFirst: FastPathAdaptive, MaxBatch: s.cfg.batchMax}
	for _, o := range s.cfg.loop {
		o(&h)
	}
	h.OnRetry = s.countRetries(h.OnRetry)
	return h
}

// countRetries returns the retry hook that counts each retry (Retries) and
// then calls hook, if set.
func (s *Store) countRetries(hook func(reason string)) func(reason string) {
	return func(reason string) {
		s.retries.Add(1)
		if hook != nil {
			hook(reason)
		}
	}
}

// BatchStats returns what the Store has done with batching on
// (WithBatchMax > 1) since it was created: the attempts it made, the
// read-write transactions that carried them (a batch the Loop split counts
// again one transaction per attempt made alone) and how many batches
// failed as a whole (and were split). All zero with batching off.
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
	rec, err := readKey(ctx, ro, name)
	if err != nil {
		return backend.Snapshot{}, err
	}
	at, err := ro.Timestamp()
	if err != nil {
		return backend.Snapshot{}, fmt.Errorf("read timestamp: %w", err)
	}
	return backend.Snapshot{Row: rec, ServerTime: at}, nil
}

// Try implements backend.Store with one read-write transaction: it reads
// the row with CURRENT_TIMESTAMP(), calls decide with that time and buffers
// the write. Spanner's locks make the read and the write one serializable
// step. A transaction that lost a race (Aborted, and what the emulator
// answers instead; see classify) is an error wrapping backend.ErrConflict.
// (Several attempts share one transaction through TryBatch.)
func (s *Store) Try(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return backend.Snapshot{}, err
	}
	if s.cfg.batchMax > 1 {
		s.txns.Add(1)
		s.batched.Add(1)
	}
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
		rec, now, err := readForUpdate(ctx, tx, name)
		if err != nil {
			return err
		}
		snap = backend.Snapshot{Row: rec, ServerTime: now}
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
		snap.Row = written
		return nil
	}, s.txOptions())
	if decideErr != nil && err != nil {
		return snap, decideErr, nil // the client may have wrapped it; return it as decide did
	}
	return snap, nil, err
}

var _ backend.Remover = (*Store)(nil)

// Remove implements backend.Remover with one read-write transaction, as
// Try: it reads the row and the decision time as Try does (the key read
// locks the row), asks ok, and buffers a Delete mutation of the key, so
// the read and the delete are one serializable step. ok runs again if the
// client runs the transaction again after Aborted. A transaction that lost
// a race is an error wrapping backend.ErrConflict (see classify).
func (s *Store) Remove(ctx context.Context, name string, ok func(backend.Snapshot) bool) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var removed bool
	_, err := s.client.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		removed = false
		rec, now, err := readForUpdate(ctx, tx, name)
		if err != nil || rec == nil || !ok(backend.Snapshot{Row: rec, ServerTime: now}) {
			return err
		}
		if err := tx.BufferWrite([]*spanner.Mutation{spanner.Delete(Table, spanner.Key{name})}); err != nil {
			return err
		}
		removed = true
		return nil
	}, s.txOptions())
	if err != nil {
		return false, classify(fmt.Sprintf("remove %q", name), err)
	}
	return removed, nil
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
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]backend.Row, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, err
	}
	if limit <= 0 {
		return nil, time.Time{}, fmt.Errorf("spanner: list %q: limit %d must be positive", prefix, limit)
	}
	ro := s.client.Single()
	defer ro.Close()
	var rows []backend.Row
	err := ro.Query(ctx, listSQL(prefix, after, limit)).Do(func(row *spanner.Row) error {
		var r leaseRow
		if err := row.ToStruct(&r); err != nil {
			return fmt.Errorf("decode a lease row: %w", err)
		}
		rows = append(rows, *r.row())
		return nil
	})
	var at time.Time
	if err == nil {
		at, err = ro.Timestamp()
	}
	if err != nil {
		return nil, time.Time{}, classify(fmt.Sprintf("list %q", prefix), err)
	}
	return rows, at, nil
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
