// Package spannerfence runs a caller's writes to Spanner in one read-write
// transaction only if a leasesvc proof verifies, is for the lease that
// fences the resource written, and has a fencing token at least the one
// stored for the resource, and stores it with them (docs/fencing.md,
// docs/contract.md §17).
//
// The token is a row of its own per resource (Schema), read first in the
// transaction, which locks it: a concurrent writer of the resource waits
// or is aborted and retried by the client, and its retry reads the higher
// token and is refused.
package spannerfence

import (
	"context"
	"errors"
	"fmt"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/leasesvc/leasesvc/fence"
)

// DefaultTable is the table of the stored tokens unless New is told
// otherwise.
const DefaultTable = "LeasesvcFence"

// Schema returns the DDL statement that creates the token table ("" means
// DefaultTable).
func Schema(table string) string {
	if table == "" {
		table = DefaultTable
	}
	return "CREATE TABLE " + table + ` (
	Resource STRING(MAX) NOT NULL,
	Lease STRING(MAX) NOT NULL,
	FencingToken INT64 NOT NULL,
	UpdateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp=true),
) PRIMARY KEY (Resource)`
}

// Fence guards the writes of resources with proofs.
type Fence struct {
	c     *spanner.Client
	v     *fence.Verifier
	table string
}

// New returns a Fence over c, verifying with v, keeping tokens in table
// ("" means DefaultTable; create it with Schema).
func New(c *spanner.Client, v *fence.Verifier, table string) (*Fence, error) {
	if c == nil || v == nil {
		return nil, errors.New("spannerfence: New needs a client and a verifier")
	}
	if table == "" {
		table = DefaultTable
	}
	return &Fence{c: c, v: v, table: table}, nil
}

// Write verifies proof and requires it to be for lease, the lease that
// fences resource; then, in one read-write transaction, reads the token of
// resource, refuses a lower one or another lease's (fence.ErrStale,
// fence.ErrOtherLease) before writes runs, runs writes, buffers the
// proof's token and commits. A proof for another lease than lease is
// refused with fence.ErrOtherLease before the transaction, and nothing is
// stored, for a resource never written too: a proof of any lease would
// otherwise bind the resource to its own. A nil writes only stores the
// token, as FenceFirst. An error of writes rolls everything back and is
// returned wrapped. writes may run more than once: the client retries an
// aborted transaction.
func (f *Fence) Write(ctx context.Context, lease, resource, proof string, writes func(context.Context, *spanner.ReadWriteTransaction) error) (fence.Claims, error) {
	if lease == "" {
		return fence.Claims{}, fmt.Errorf("spannerfence: Write of %q: lease is empty: name the lease that fences the resource", resource)
	}
	c, err := f.v.Verify(ctx, proof)
	if err != nil {
		return fence.Claims{}, err
	}
	if c.Lease != lease {
		return fence.Claims{}, fmt.Errorf("%w: %q is fenced by lease %q, the proof is for %q", fence.ErrOtherLease, resource, lease, c.Lease)
	}
	_, err = f.c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		row, err := tx.ReadRow(ctx, f.table, spanner.Key{resource}, []string{"Lease", "FencingToken"})
		switch {
		case spanner.ErrCode(err) == codes.NotFound:
		case err != nil:
			return fmt.Errorf("spannerfence: read the token of %q: %w", resource, err)
		default:
			var lease string
			var stored int64
			if err := row.Columns(&lease, &stored); err != nil {
				return fmt.Errorf("spannerfence: decode the token of %q: %w", resource, err)
			}
			if lease != c.Lease {
				return fmt.Errorf("%w: %q has the token of lease %q, the proof is for %q (a row this check did not write: remove it to let %q fence the resource)", fence.ErrOtherLease, resource, lease, c.Lease, c.Lease)
			}
			if stored > c.FencingToken {
				return fmt.Errorf("%w: token %d of lease %q, but token %d wrote %q", fence.ErrStale, c.FencingToken, c.Lease, stored, resource)
			}
		}
		if writes != nil {
			if err := writes(ctx, tx); err != nil {
				return fmt.Errorf("spannerfence: writes of %q: %w", resource, err)
			}
		}
		return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate(f.table,
			[]string{"Resource", "Lease", "FencingToken", "UpdateTime"},
			[]any{resource, c.Lease, c.FencingToken, spanner.CommitTimestamp})})
	})
	if err != nil {
		return fence.Claims{}, err
	}
	return c, nil
}

// FenceFirst is Write with no writes: it advances resource to the proof's
// token and writes nothing else. A successor calls it as soon as it
// leads, so that its predecessor's late writes are refused (fence.ErrStale)
// before the successor's own first write.
func (f *Fence) FenceFirst(ctx context.Context, lease, resource, proof string) (fence.Claims, error) {
	return f.Write(ctx, lease, resource, proof, nil)
}
