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

// DefaultTable is the table of the leases unless WithTable names another.
const DefaultTable = "leasesvc_leases"

// Channel is the NOTIFY channel on which a write that ends a holding sends
// the lease name.
const Channel = "leasesvc_lease_ended"

// columns are the table's columns, in the order record scans them.
const columns = "name, holder, fencing_token, ttl_ms, acquire_time, renew_time, expire_time, transitions, metadata, principal, revoked_by, revoke_reason"

// Store is a backend.Store over one PostgreSQL table. It is safe for
// concurrent use; the pool stays the caller's.
type Store struct {
	pool  *pgxpool.Pool
	table string
}

var (
	_ backend.Store         = (*Store)(nil)
	_ backend.ExpiryScanner = (*Store)(nil)
	_ backend.Hinter        = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithTable names the table of the leases (a plain SQL identifier).
func WithTable(name string) Option { return func(s *Store) { s.table = name } }

// New returns a Store over pool. It does no I/O; see Migrate and CheckSchema.
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	s := &Store{pool: pool, table: DefaultTable}
	for _, o := range opts {
		o(s)
	}
	if pool == nil {
		return nil, errors.New("postgres: New: pool is nil")
	}
	if !identRE.MatchString(s.table) {
		return nil, fmt.Errorf("postgres: table %q: want a plain identifier ([a-z_][a-z0-9_]*, ≤ 63 bytes)", s.table)
	}
	return s, nil
}

// Hints implements backend.Hinter: a read takes no lock and costs one round
// trip, an attempt a transaction, so refusals are answered from a read.
func (s *Store) Hints() backend.Hints { return backend.Hints{ReadFirst: backend.ReadFirstAdaptive} }

// batcher is a pool or a transaction.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// read reads the row under name (locking it with lock) and then, in a
// later statement, clock_timestamp(): the time of a decision on the row.
func (s *Store) read(ctx context.Context, q batcher, name string, lock bool) (backend.Snapshot, error) {
	sql := "SELECT " + columns + " FROM " + s.table + " WHERE name = $1"
	if lock {
		sql += " FOR UPDATE"
	}
	b := &pgx.Batch{}
	b.Queue(sql, name)
	b.Queue("SELECT clock_timestamp()")
	res := q.SendBatch(ctx, b)
	defer res.Close()
	var snap backend.Snapshot
	rec, err := scanRecord(res.QueryRow())
	switch {
	case err == nil:
		snap.Record = rec
	case !errors.Is(err, pgx.ErrNoRows):
		return snap, classify(ctx, "read "+name, err)
	}
	if err := res.QueryRow().Scan(&snap.ServerTime); err != nil {
		return snap, classify(ctx, "read the clock", err)
	}
	return snap, nil
}

// Get implements backend.Store: one round trip, no lock.
func (s *Store) Get(ctx context.Context, name string) (backend.Snapshot, error) {
	return s.read(ctx, s.pool, name, false)
}

// Try implements backend.Store: one READ COMMITTED transaction that locks
// the row, takes the clock after the lock, decides, and writes.
func (s *Store) Try(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return backend.Snapshot{}, classify(ctx, "begin", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	snap, err := s.read(ctx, tx, name, true)
	if err != nil {
		return backend.Snapshot{}, err
	}
	next, err := decide(snap)
	if err != nil || next == nil {
		return snap, err
	}
	rec := *next
	rec.Name = name
	if rec.TTL%time.Millisecond != 0 {
		return backend.Snapshot{}, fmt.Errorf("postgres: record %q: TTL %v is not a whole number of milliseconds", name, rec.TTL)
	}
	for _, t := range []*time.Time{&rec.AcquireTime, &rec.RenewTime, &rec.ExpireTime} {
		*t = t.Truncate(time.Microsecond).UTC()
	}
	write := "UPDATE " + s.table + " SET holder = $2, fencing_token = $3, ttl_ms = $4, acquire_time = $5, renew_time = $6, expire_time = $7, transitions = $8, metadata = $9, principal = $10, revoked_by = $11, revoke_reason = $12 WHERE name = $1"
	if snap.Record == nil {
		write = "INSERT INTO " + s.table + " (" + columns + ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (name) DO NOTHING"
	}
	b := &pgx.Batch{}
	b.Queue(write, name, rec.Holder, rec.FencingToken, rec.TTL.Milliseconds(), rec.AcquireTime, rec.RenewTime,
		rec.ExpireTime, rec.Transitions, string(rec.Metadata), rec.Principal, rec.RevokedBy, rec.RevokeReason)
	if !rec.ExpireTime.After(snap.ServerTime) && snap.Record != nil && snap.Record.ExpireTime.After(snap.ServerTime) {
		b.Queue("SELECT pg_notify($1, $2)", Channel, name) // the holding ends: wake waiters elsewhere
	}
	res := tx.SendBatch(ctx, b)
	tag, err := res.Exec()
	if cerr := res.Close(); err == nil {
		err = cerr // the notification's error, if any
	}
	if err != nil {
		return backend.Snapshot{}, classify(ctx, "write "+name, err)
	}
	if tag.RowsAffected() != 1 {
		return backend.Snapshot{}, backend.Conflict("inserted", fmt.Errorf("postgres: write %q: another transaction created the row", name))
	}
	if err := tx.Commit(ctx); err != nil {
		return backend.Snapshot{}, classify(ctx, "commit "+name, err)
	}
	if len(rec.Metadata) == 0 {
		rec.Metadata = nil
	}
	return backend.Snapshot{Record: &rec, ServerTime: snap.ServerTime}, nil
}

// List implements backend.Store with one query on the primary key, ordered
// by name in the "C" collation (byte order), and the clock after it.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]backend.Record, time.Time, error) {
	b := &pgx.Batch{}
	b.Queue("SELECT "+columns+" FROM "+s.table+" WHERE name >= $1 AND name > $2 AND starts_with(name, $1) ORDER BY name LIMIT $3", prefix, after, limit)
	b.Queue("SELECT clock_timestamp()")
	res := s.pool.SendBatch(ctx, b)
	defer res.Close()
	recs, err := scanRecords(res)
	if err != nil {
		return nil, time.Time{}, classify(ctx, "list", err)
	}
	var now time.Time
	if err := res.QueryRow().Scan(&now); err != nil {
		return nil, time.Time{}, classify(ctx, "read the clock", err)
	}
	return recs, now, nil
}

// ScanExpiry implements backend.ExpiryScanner on the (expire_time, name)
// index.
func (s *Store) ScanExpiry(ctx context.Context, after backend.Cursor, until time.Time, limit int) ([]backend.Record, error) {
	b := &pgx.Batch{}
	b.Queue("SELECT "+columns+" FROM "+s.table+" WHERE (expire_time, name) > ($1, $2) AND expire_time <= $3 ORDER BY expire_time, name LIMIT $4",
		after.ExpireTime, after.Name, until, limit)
	res := s.pool.SendBatch(ctx, b)
	defer res.Close()
	recs, err := scanRecords(res)
	return recs, classify(ctx, "scan expiry", err)
}

// Ping implements backend.Store: SELECT 1.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	return classify(ctx, "ping", s.pool.QueryRow(ctx, "SELECT 1").Scan(&one))
}

// Listen calls wake with the name of every lease whose holding a write
// through any instance ended (NOTIFY on Channel), until ctx is done. It
// holds one connection of the pool and reconnects after a failure.
func (s *Store) Listen(ctx context.Context, wake func(name string)) error {
	for ctx.Err() == nil {
		if err := s.listen(ctx, wake); err != nil && ctx.Err() == nil {
			select { // the database went away: try again shortly
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
		}
	}
	return ctx.Err()
}

func (s *Store) listen(ctx context.Context, wake func(string)) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return err
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx)) // never back to the pool while listening
			return err
		}
		wake(n.Payload)
	}
}

// scanRecord reads one row of columns.
func scanRecord(row pgx.Row) (*backend.Record, error) {
	var (
		r  backend.Record
		ms int64
		md string
	)
	err := row.Scan(&r.Name, &r.Holder, &r.FencingToken, &ms, &r.AcquireTime, &r.RenewTime, &r.ExpireTime,
		&r.Transitions, &md, &r.Principal, &r.RevokedBy, &r.RevokeReason)
	if err != nil {
		return nil, err
	}
	r.TTL = time.Duration(ms) * time.Millisecond
	for _, t := range []*time.Time{&r.AcquireTime, &r.RenewTime, &r.ExpireTime} {
		*t = t.UTC()
	}
	if md != "" {
		r.Metadata = []byte(md)
	}
	return &r, nil
}

// scanRecords reads the rows of the next query of res.
func scanRecords(res pgx.BatchResults) ([]backend.Record, error) {
	rows, err := res.Query()
	if err != nil {
		return nil, err
	}
	var out []backend.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, *r)
	}
	return out, rows.Err()
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
