// Package pgfence runs a caller's writes to PostgreSQL in one transaction
// only if a leasesvc proof verifies, is for the lease that fences the
// resource written, and has a fencing token at least the one stored for
// the resource, and stores the token with them (docs/fencing.md,
// docs/contract.md §17).
//
// The token lives in a table of its own (Schema), one row per resource,
// in the same database as the data: the fenced statement locks that row
// until the transaction ends, so two writers of one resource are ordered
// by the database, and a deposed holder's late transaction finds the
// successor's higher token and is refused before any of its writes run.
//
// The Python SDK's leasesvc.pgfence and the TypeScript SDK's
// @leasesvc/client/pgfence create the same table (the same Schema text)
// and run the same statements with the same refusals, so a resource one
// language fenced is written by the others; docs/fencing.md walks through
// a takeover in each.
package pgfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/leasesvc/leasesvc/fence"
)

// DefaultTable is the table of the stored tokens unless New is told
// otherwise.
const DefaultTable = "leasesvc_fence"

// Schema returns the statement that creates the token table ("" means
// DefaultTable).
func Schema(table string) string {
	if table == "" {
		table = DefaultTable
	}
	return `CREATE TABLE IF NOT EXISTS ` + pgx.Identifier{table}.Sanitize() + ` (
	resource      text PRIMARY KEY,
	lease         text NOT NULL,
	fencing_token bigint NOT NULL CHECK (fencing_token > 0),
	updated_at    timestamptz NOT NULL DEFAULT now()
)`
}

// Beginner starts a transaction: a *pgx.Conn, a *pgxpool.Pool.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Fence guards the writes of resources with proofs.
type Fence struct {
	db     Beginner
	v      *fence.Verifier
	upsert string
	read   string
}

// New returns a Fence over db, verifying with v, storing tokens in table
// ("" means DefaultTable; create it with Schema).
func New(db Beginner, v *fence.Verifier, table string) (*Fence, error) {
	if db == nil || v == nil {
		return nil, errors.New("pgfence: New needs a database and a verifier")
	}
	if table == "" {
		table = DefaultTable
	}
	t := pgx.Identifier{table}.Sanitize()
	return &Fence{db: db, v: v,
		// ON CONFLICT locks the resource's row even when WHERE refuses:
		// a concurrent writer waits for this transaction's end.
		upsert: `INSERT INTO ` + t + ` AS f (resource, lease, fencing_token) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET fencing_token = EXCLUDED.fencing_token, updated_at = now()
WHERE f.lease = EXCLUDED.lease AND f.fencing_token <= EXCLUDED.fencing_token
RETURNING fencing_token`,
		read: `SELECT lease, fencing_token FROM ` + t + ` WHERE resource = $1`,
	}, nil
}

// Write verifies proof and requires it to be for lease, the lease that
// fences resource; then, in one transaction, stores its token for resource
// if it is at least the stored one (of the same lease), runs writes, and
// commits. A refused proof stores nothing and runs none of writes: the
// error wraps fence.ErrOtherLease (the proof is for another lease than
// lease, or the resource's stored token is another lease's),
// fence.ErrStale (a higher token wrote) or a Verifier error. A proof for
// another lease is refused for a resource never written too: a proof of
// any lease would otherwise bind the resource to its own. A nil writes
// only stores the token, as FenceFirst. An error of writes rolls
// everything back, the token included, and is returned wrapped.
//
// A transaction that fails to serialize with a concurrent one (SQLSTATE
// 40001 under repeatable read or serializable isolation, or 40P01, a
// deadlock) is rolled back and run again, writes included, a few times
// with a short backoff while ctx allows; if every attempt fails so, the
// error wraps ErrSerialization (and the database's error): the caller
// may run the Write again. Keep writes free of effects outside the
// transaction.
func (f *Fence) Write(ctx context.Context, lease, resource, proof string, writes func(pgx.Tx) error) (fence.Claims, error) {
	if lease == "" {
		return fence.Claims{}, fmt.Errorf("pgfence: Write of %q: lease is empty: name the lease that fences the resource", resource)
	}
	c, err := f.v.Verify(ctx, proof)
	if err != nil {
		return fence.Claims{}, err
	}
	if c.Lease != lease {
		return fence.Claims{}, fmt.Errorf("%w: %q is fenced by lease %q, the proof is for %q", fence.ErrOtherLease, resource, lease, c.Lease)
	}
	if err := retry(ctx, resource, func() error { return f.write(ctx, resource, c, writes) }); err != nil {
		return fence.Claims{}, err
	}
	return c, nil
}

// FenceFirst is Write with no writes: it advances resource to the proof's
// token and writes nothing else. A successor calls it as soon as it
// leads, so that its predecessor's late writes are refused (fence.ErrStale)
// before the successor's own first write; without it, a late write that
// reaches the database between the takeover and that first write passes.
func (f *Fence) FenceFirst(ctx context.Context, lease, resource, proof string) (fence.Claims, error) {
	return f.Write(ctx, lease, resource, proof, nil)
}

// write is one attempt of Write, with c verified and for the lease that
// fences resource.
func (f *Fence) write(ctx context.Context, resource string, c fence.Claims, writes func(pgx.Tx) error) error {
	tx, err := f.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgfence: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit: a no-op
	var stored int64
	err = tx.QueryRow(ctx, f.upsert, resource, c.Lease, c.FencingToken).Scan(&stored)
	if errors.Is(err, pgx.ErrNoRows) {
		var lease string
		if err := tx.QueryRow(ctx, f.read, resource).Scan(&lease, &stored); err != nil {
			return fmt.Errorf("pgfence: read the token of %q: %w", resource, err)
		}
		if lease != c.Lease {
			return fmt.Errorf("%w: %q has the token of lease %q, the proof is for %q (a row this check did not write: remove it to let %q fence the resource)", fence.ErrOtherLease, resource, lease, c.Lease, c.Lease)
		}
		return fmt.Errorf("%w: token %d of lease %q, but token %d wrote %q", fence.ErrStale, c.FencingToken, c.Lease, stored, resource)
	}
	if err != nil {
		return fmt.Errorf("pgfence: store the token of %q: %w", resource, err)
	}
	if writes != nil {
		if err := writes(tx); err != nil {
			return fmt.Errorf("pgfence: writes of %q: %w", resource, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgfence: commit %q: %w", resource, err)
	}
	return nil
}
