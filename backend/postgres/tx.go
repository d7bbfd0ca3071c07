package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/backend"
)

// tx is the READ COMMITTED transaction of one attempt (Try, TryBatch) on a
// connection of the pool, in two round trips where a pgx.Tx takes four:
// BEGIN goes in the round trip of the locking read (lock), and COMMIT in
// that of the writes (commit). Each round trip ends with one Sync, and a
// statement that fails makes the server skip the rest of it, so a read
// that fails leaves the transaction open and failed, and a write that
// fails never reaches its COMMIT: end rolls back whatever is left open
// and returns the connection to the pool.
type tx struct {
	conn *pgxpool.Conn
}

// begin takes a connection of pool for a transaction; nothing is sent
// until lock.
func begin(ctx context.Context, pool *pgxpool.Pool) (*tx, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, classify(ctx, "begin", err)
	}
	return &tx{conn: conn}, nil
}

// lock begins the transaction and, in the same round trip, locks and reads
// the rows where says (a FOR UPDATE clause), then clock_timestamp(), a
// time after the locks (see query).
func (t *tx) lock(ctx context.Context, what, where string, args ...any) ([]backend.Row, time.Time, error) {
	return queryAfter(ctx, t.conn, "BEGIN", what, where, args...)
}

// commit sends the writes queued on b and then COMMIT, in one round trip.
// check reads the writes' outcomes from the results, in the order they
// were queued, and returns the error of a statement (which skips the
// COMMIT: nothing is written); what names the writes in errors.
func (t *tx) commit(ctx context.Context, what string, b *pgx.Batch, check func(pgx.BatchResults) error) error {
	b.Queue("COMMIT")
	res := t.conn.SendBatch(ctx, b)
	err := check(res)
	if cerr := res.Close(); err == nil { // the COMMIT's error, if any
		err = cerr
	}
	return classify(ctx, what, err)
}

// end rolls back the transaction if it is still open (it wrote nothing:
// a failure, or an answer that writes nothing) and returns the connection
// to the pool; one whose rollback fails is closed, as pgx.Tx does.
func (t *tx) end(ctx context.Context) {
	defer t.conn.Release() // the pool drops a connection left closed or in a transaction
	pc := t.conn.Conn().PgConn()
	if pc.IsClosed() || pc.TxStatus() == 'I' {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if _, err := t.conn.Exec(ctx, "ROLLBACK"); err != nil {
		_ = t.conn.Conn().Close(ctx)
	}
}
