package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/backend"
)

// table is the table of the leases (schema.sql).
const table = "leasesvc_leases"

// Channel is the NOTIFY channel of Notify and Listen.
const Channel = "leasesvc_events"

// columns are the table's columns, in the order scanRecord reads them.
const columns = "name, holder, fencing_token, ttl_ms, acquire_time, renew_time, expire_time, transitions, metadata, principal, revoked_by, revoke_reason, succession"

// Store is a backend.Store, backend.BatchStore, backend.ExpiryScanner,
// backend.Remover and backend.Notifier over the table of schema.sql. It is
// safe for concurrent use; the pool stays the caller's.
type Store struct {
	pool     *pgxpool.Pool
	batchMax int
}

var _ backend.BatchStore = (*Store)(nil)

// DefaultBatchMax is how many attempts one transaction carries, at most,
// unless WithBatchMax says otherwise: 1, no batching, as a pool runs many
// transactions at once.
const DefaultBatchMax = 1

// BatchMaxLimit bounds WithBatchMax: a batch's read names every lease in
// one statement and its writes are one round trip.
const BatchMaxLimit = 1000

// Option configures a Store.
type Option func(*Store)

// WithBatchMax sets the batch limit the Store declares (Hints.MaxBatch,
// 1 ≤ n ≤ BatchMaxLimit, default DefaultBatchMax): with n > 1, a
// backend.Loop lets the attempts on distinct leases that arrive while one
// transaction is in flight share the next, up to n (see TryBatch). Out of
// range values are clamped.
func WithBatchMax(n int) Option { return func(s *Store) { s.batchMax = min(max(n, 1), BatchMaxLimit) } }

// New returns a Store over pool. It does no I/O; see Migrate and CheckSchema.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool, batchMax: DefaultBatchMax}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Hints implements backend.Hinter: a read takes no lock and costs one round
// trip, an attempt a transaction, so refusals are answered from a read; and
// the batch limit of WithBatchMax.
func (s *Store) Hints() backend.Hints {
	return backend.Hints{ReadFirst: backend.ReadFirstAdaptive, MaxBatch: s.batchMax}
}

// batcher is a pool or a transaction.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// query runs a query of rows and then, in a later statement of the same
// round trip, clock_timestamp(): a time after the query's snapshot (and
// after its row locks, if any), the time of a decision on what it read.
func query(ctx context.Context, q batcher, what, where string, args ...any) ([]backend.Row, time.Time, error) {
	return queryAfter(ctx, q, "", what, where, args...)
}

// queryAfter is query with first, unless empty, a statement without rows
// (tx's BEGIN) run ahead of it in the same round trip.
func queryAfter(ctx context.Context, q batcher, first, what, where string, args ...any) ([]backend.Row, time.Time, error) {
	b := &pgx.Batch{}
	if first != "" {
		b.Queue(first)
	}
	b.Queue("SELECT "+columns+" FROM "+table+" WHERE "+where, args...)
	b.Queue("SELECT clock_timestamp()")
	res := q.SendBatch(ctx, b)
	defer res.Close()
	if first != "" {
		if _, err := res.Exec(); err != nil {
			return nil, time.Time{}, classify(ctx, what, err)
		}
	}
	var out []backend.Row
	var now time.Time
	rows, err := res.Query()
	for err == nil && rows.Next() {
		var r backend.Row
		if r, err = scanRow(rows); err == nil {
			out = append(out, r)
		}
	}
	if err == nil {
		rows.Close()
		if err = rows.Err(); err == nil {
			err = res.QueryRow().Scan(&now)
		}
	}
	return out, now, classify(ctx, what, err)
}

// read reads the row under name at a time after it, locking it for an
// update with lock, else sharing it: the batch is one implicit transaction,
// so no write commits between the row read and the clock read (a time
// after an unlocked snapshot could show a holding that has since ended).
func read(ctx context.Context, q batcher, name string, lock bool) (backend.Snapshot, error) {
	where := "name = $1 FOR SHARE"
	if lock {
		where = "name = $1 FOR UPDATE"
	}
	rows, now, err := query(ctx, q, "read "+name, where, name)
	return snapshotOf(rows, now), err
}

// snapshotOf is the snapshot of the read of one name at now: its row, if
// any.
func snapshotOf(rows []backend.Row, now time.Time) backend.Snapshot {
	snap := backend.Snapshot{ServerTime: now}
	if len(rows) > 0 {
		snap.Row = &rows[0]
	}
	return snap
}

// Get implements backend.Store: one round trip, no lock.
func (s *Store) Get(ctx context.Context, name string) (backend.Snapshot, error) {
	return read(ctx, s.pool, name, false)
}

// Try implements backend.Store: one READ COMMITTED transaction that locks
// the row, takes the clock after the lock, decides, and writes, in two
// round trips (see tx): BEGIN with the locking read and the clock, then
// the write with COMMIT.
func (s *Store) Try(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	t, err := begin(ctx, s.pool)
	if err != nil {
		return backend.Snapshot{}, err
	}
	defer t.end(ctx)
	rows, now, err := t.lock(ctx, "read "+name, "name = $1 FOR UPDATE", name)
	if err != nil {
		return backend.Snapshot{}, err
	}
	snap := snapshotOf(rows, now)
	next, err := decide(snap)
	if err != nil || next == nil {
		return snap, err
	}
	// One round trip: the write, when the holding ends the wake-up sent at
	// commit, and COMMIT. A write that lost its race (an insert of a row
	// created since the read) wrote nothing: the commit commits nothing.
	b := &pgx.Batch{}
	w, err := queueWrite(b, name, snap, next)
	if err != nil {
		return backend.Snapshot{}, err
	}
	var lost error
	if err := t.commit(ctx, "write "+name, b, func(res pgx.BatchResults) (err error) {
		lost, err = w.check(res)
		return err
	}); err != nil {
		return backend.Snapshot{}, err
	}
	if lost != nil {
		return backend.Snapshot{}, lost
	}
	return w.snapshot(), nil
}

var _ backend.Remover = (*Store)(nil)

// Remove implements backend.Remover in a transaction like Try's: it locks
// the row, takes the clock after the lock, asks ok, and deletes the locked
// row. A row that still holds a live holding (expire time after the read)
// also sends the ended-holding wake-up at commit, as a write that ends one
// does. A transaction that waited for another's lock reads what that one
// committed (READ COMMITTED), so ok always sees the current row.
func (s *Store) Remove(ctx context.Context, name string, ok func(backend.Snapshot) bool) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, classify(ctx, "begin", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	snap, err := read(ctx, tx, name, true)
	if err != nil {
		return false, err
	}
	if snap.Row == nil || !ok(snap) {
		return false, nil
	}
	b := &pgx.Batch{}
	b.Queue("DELETE FROM "+table+" WHERE name = $1", name)
	notify := snap.Row.ExpireTime.After(snap.ServerTime)
	if notify {
		b.Queue("SELECT pg_notify($1, $2)", Channel, backend.EndedNotification+name) // wake waiters elsewhere
	}
	res := tx.SendBatch(ctx, b)
	tag, err := res.Exec()
	if notify {
		_, nerr := res.Exec()
		err = errors.Join(err, nerr)
	}
	if err = errors.Join(err, res.Close()); err != nil {
		return false, classify(ctx, "remove "+name, err)
	}
	if tag.RowsAffected() != 1 { // cannot happen while the lock holds; a lost race if it does
		return false, fmt.Errorf("postgres: remove %q: %w", name, backend.Conflict("deleted", errors.New("the locked row was gone")))
	}
	if err := tx.Commit(ctx); err != nil {
		return false, classify(ctx, "commit remove "+name, err)
	}
	return true, nil
}

// write is one row queued for writing, with what checks its outcome.
type write struct {
	row    backend.Row
	at     time.Time
	notify bool // an ended-holding notification follows the write
}

// queueWrite queues on b the write of next under name, decided on snap: an
// insert of a row that was missing at the read, or an update of the locked
// row (a row created since the read is a conflict: no row affected), and,
// when the write ends a holding, the wake-up sent at commit.
func queueWrite(b *pgx.Batch, name string, snap backend.Snapshot, next *backend.Row) (*write, error) {
	if next.TTL%time.Millisecond != 0 {
		return nil, fmt.Errorf("postgres: record %q: TTL %v is not a whole number of milliseconds", name, next.TTL)
	}
	row := backend.Clone(*next) // as it reads back
	row.Name = name
	for _, t := range []*time.Time{&row.AcquireTime, &row.RenewTime, &row.ExpireTime} {
		*t = t.Truncate(time.Microsecond).UTC()
	}
	if len(row.Metadata) == 0 {
		row.Metadata = nil
	}
	if len(row.Value) == 0 {
		row.Value = nil
	}
	b.Queue("INSERT INTO "+table+" ("+columns+") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ON CONFLICT (name) DO UPDATE SET ("+
		columns+") = ROW(EXCLUDED.*) WHERE $14", name, row.Holder, row.FencingToken, row.TTL.Milliseconds(), row.AcquireTime, row.RenewTime,
		row.ExpireTime, row.Transitions, string(row.Metadata), row.Principal, row.Legacy.RevokedBy, row.Legacy.RevokeReason, string(row.Value), snap.Row != nil)
	w := &write{row: row, at: snap.ServerTime}
	if !row.ExpireTime.After(snap.ServerTime) && snap.Row != nil && snap.Row.ExpireTime.After(snap.ServerTime) {
		b.Queue("SELECT pg_notify($1, $2)", Channel, backend.EndedNotification+name) // wake waiters elsewhere
		w.notify = true
	}
	return w, nil
}

// check reads the outcome of w's statements from res, in the order
// queueWrite queued them: err is a statement's error (which fails the
// transaction), lost a conflict of this write alone (no row written: a row
// created since the read).
func (w *write) check(res pgx.BatchResults) (lost, err error) {
	tag, err := res.Exec()
	if w.notify {
		_, nerr := res.Exec()
		err = errors.Join(err, nerr)
	}
	if err == nil && tag.RowsAffected() != 1 {
		lost = backend.Conflict("inserted", fmt.Errorf("postgres: write %q: another transaction created the row", w.row.Name))
	}
	return lost, err
}

// TryBatch implements backend.BatchStore: one READ COMMITTED transaction
// that locks the rows of every attempt (in name order, as every batch does,
// so that two batches wait for each other rather than deadlock), takes the
// clock after the locks, runs each attempt's decide on its own row, and
// sends the writes in one round trip before one commit. An attempt whose
// decide fails, whose row cannot be written, or whose insert finds a
// row created since the read (a conflict, which Loop retries) gets that as
// its Result and writes nothing; the others are unaffected. err is the
// transaction's failure as a whole: nothing was written.
func (s *Store) TryBatch(ctx context.Context, attempts []backend.Attempt) ([]backend.Result, error) {
	names := make([]string, len(attempts))
	for i, a := range attempts {
		names[i] = a.Name
	}
	what := fmt.Sprintf("update %d leases in one transaction", len(attempts))
	t, err := begin(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	defer t.end(ctx)
	rows, now, err := t.lock(ctx, what, "name = ANY($1) ORDER BY name FOR UPDATE", names)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*backend.Row, len(rows))
	for i := range rows {
		byName[rows[i].Name] = &rows[i]
	}
	results := make([]backend.Result, len(attempts))
	writes := make([]*write, len(attempts))
	b := &pgx.Batch{}
	for i, a := range attempts {
		snap := backend.Snapshot{Row: byName[a.Name], ServerTime: now}
		next, err := a.Decide(snap)
		if err != nil || next == nil {
			results[i] = backend.Result{Snapshot: snap, Err: err}
			continue
		}
		if writes[i], err = queueWrite(b, a.Name, snap, next); err != nil {
			results[i] = backend.Result{Err: err}
		}
	}
	if b.Len() == 0 {
		return results, nil // nothing to write: end rolls back the read's locks
	}
	err = t.commit(ctx, what, b, func(res pgx.BatchResults) error {
		for i, w := range writes {
			if w == nil {
				continue
			}
			lost, err := w.check(res)
			if err != nil {
				return err
			}
			if results[i].Err = lost; lost == nil {
				results[i].Snapshot = w.snapshot()
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// snapshot returns the snapshot the write produced.
func (w *write) snapshot() backend.Snapshot {
	row := w.row
	return backend.Snapshot{Row: &row, ServerTime: w.at}
}

// List implements backend.Store with one query on the primary key, ordered
// by name in the "C" collation (byte order).
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]backend.Row, time.Time, error) {
	return query(ctx, s.pool, "list", "name >= $1 AND name > $2 AND starts_with(name, $1) ORDER BY name LIMIT $3 FOR SHARE", prefix, after, limit)
}

// ScanExpiry implements backend.ExpiryScanner on the (expire_time, name)
// index.
func (s *Store) ScanExpiry(ctx context.Context, after backend.Cursor, until time.Time, limit int) ([]backend.Row, error) {
	rows, _, err := query(ctx, s.pool, "scan expiry", "(expire_time, name) > ($1, $2) AND expire_time <= $3 ORDER BY expire_time, name LIMIT $4",
		after.ExpireTime, after.Name, until, limit)
	return rows, err
}

// Ping implements backend.Store: a round trip on a connection of the pool.
func (s *Store) Ping(ctx context.Context) error { return classify(ctx, "ping", s.pool.Ping(ctx)) }

// Notify implements backend.Notifier: NOTIFY on Channel.
func (s *Store) Notify(ctx context.Context, payload string) error {
	_, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", Channel, payload)
	return classify(ctx, "notify", err)
}

// Listen implements backend.Notifier: LISTEN on Channel until ctx is done,
// on one connection of the pool, reconnecting after a failure.
func (s *Store) Listen(ctx context.Context, got func(payload string)) error {
	for ctx.Err() == nil {
		if conn, err := s.pool.Acquire(ctx); err == nil {
			if _, err = conn.Exec(ctx, "LISTEN "+Channel); err == nil {
				for n, err := conn.Conn().WaitForNotification(ctx); err == nil; n, err = conn.Conn().WaitForNotification(ctx) {
					got(n.Payload)
				}
			}
			_ = conn.Conn().Close(context.WithoutCancel(ctx)) // never back to the pool while listening
			conn.Release()
		}
		select { // the database went away: try again shortly
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
	return ctx.Err()
}

// scanRow reads one row of columns: the columns of a backend.Row, with
// revoked_by and revoke_reason its Legacy columns and succession its Value.
// Empty metadata or value reads as nil.
func scanRow(row pgx.Row) (backend.Row, error) {
	var r backend.Row
	var ms int64
	var md, value string
	if err := row.Scan(&r.Name, &r.Holder, &r.FencingToken, &ms, &r.AcquireTime, &r.RenewTime, &r.ExpireTime,
		&r.Transitions, &md, &r.Principal, &r.Legacy.RevokedBy, &r.Legacy.RevokeReason, &value); err != nil {
		return backend.Row{}, err
	}
	r.TTL = time.Duration(ms) * time.Millisecond
	r.AcquireTime, r.RenewTime, r.ExpireTime = r.AcquireTime.UTC(), r.RenewTime.UTC(), r.ExpireTime.UTC()
	if md != "" {
		r.Metadata = []byte(md)
	}
	if value != "" {
		r.Value = []byte(value)
	}
	return r, nil
}

// classify maps a pgx error to the backend's: ctx's own error once ctx is
// done; a serialization failure, deadlock or unique violation is a lost
// race (backend.ErrConflict); anything else — a lost connection, a server
// shutting down or short of resources, a missing table — is
// backend.ErrUnavailable, as the service cannot reach its data until the
// database or someone acts. The native error stays reachable.
func classify(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) && (pg.Code == "40001" || pg.Code == "40P01" || pg.Code == "23505") {
		return fmt.Errorf("postgres: %s: %w", what, backend.Conflict(pg.Code, err))
	}
	return fmt.Errorf("postgres: %s: %w: %w", what, backend.ErrUnavailable, err)
}
