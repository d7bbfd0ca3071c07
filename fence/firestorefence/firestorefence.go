// Package firestorefence runs a caller's writes to Firestore in one
// transaction only if a leasesvc proof verifies, is for the lease that
// fences the resource written, and has a fencing token at least the one
// stored for the resource, and stores it with them (docs/fencing.md,
// docs/contract.md §17).
//
// The token is a document of its own per resource (collection
// DefaultCollection unless told otherwise), read first in the
// transaction: a transaction that read it is aborted and retried by
// Firestore if another commits a new token first, and the retry reads
// the higher token and is refused.
package firestorefence

import (
	"context"
	"errors"
	"fmt"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasesvc/leasesvc/fence"
)

// DefaultCollection holds the stored tokens unless New is told otherwise.
const DefaultCollection = "leasesvc-fence"

// token is a resource's stored token document.
type token struct {
	Lease        string `firestore:"lease"`
	FencingToken int64  `firestore:"fencingToken"`
}

// Fence guards the writes of resources with proofs.
type Fence struct {
	c    *firestore.Client
	v    *fence.Verifier
	coll string
}

// New returns a Fence over c, verifying with v, keeping tokens in
// collection ("" means DefaultCollection).
func New(c *firestore.Client, v *fence.Verifier, collection string) (*Fence, error) {
	if c == nil || v == nil {
		return nil, errors.New("firestorefence: New needs a client and a verifier")
	}
	if collection == "" {
		collection = DefaultCollection
	}
	return &Fence{c: c, v: v, coll: collection}, nil
}

// Write verifies proof and requires it to be for lease, the lease that
// fences resource (a document id); then, in one transaction, reads the
// token of resource, refuses a lower one or another lease's
// (fence.ErrStale, fence.ErrOtherLease) before writes runs, runs writes
// (which may read more, then write), stores the proof's token and commits.
// A proof for another lease than lease is refused with fence.ErrOtherLease
// before the transaction, and nothing is stored, for a resource never
// written too: a proof of any lease would otherwise bind the resource to
// its own. A nil writes only stores the token, as FenceFirst. An error of
// writes rolls everything back and is returned wrapped. writes may run
// more than once: Firestore retries a transaction that lost a race.
func (f *Fence) Write(ctx context.Context, lease, resource, proof string, writes func(context.Context, *firestore.Transaction) error) (fence.Claims, error) {
	if lease == "" {
		return fence.Claims{}, fmt.Errorf("firestorefence: Write of %q: lease is empty: name the lease that fences the resource", resource)
	}
	c, err := f.v.Verify(ctx, proof)
	if err != nil {
		return fence.Claims{}, err
	}
	if c.Lease != lease {
		return fence.Claims{}, fmt.Errorf("%w: %q is fenced by lease %q, the proof is for %q", fence.ErrOtherLease, resource, lease, c.Lease)
	}
	doc := f.c.Collection(f.coll).Doc(resource)
	err = f.c.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snap, err := tx.Get(doc)
		switch {
		case status.Code(err) == codes.NotFound:
		case err != nil:
			return fmt.Errorf("firestorefence: read the token of %q: %w", resource, err)
		default:
			var stored token
			if err := snap.DataTo(&stored); err != nil {
				return fmt.Errorf("firestorefence: decode the token of %q: %w", resource, err)
			}
			if stored.Lease != c.Lease {
				return fmt.Errorf("%w: %q has the token of lease %q, the proof is for %q (a document this check did not write: remove it to let %q fence the resource)", fence.ErrOtherLease, resource, stored.Lease, c.Lease, c.Lease)
			}
			if stored.FencingToken > c.FencingToken {
				return fmt.Errorf("%w: token %d of lease %q, but token %d wrote %q", fence.ErrStale, c.FencingToken, c.Lease, stored.FencingToken, resource)
			}
		}
		if writes != nil {
			if err := writes(ctx, tx); err != nil {
				return fmt.Errorf("firestorefence: writes of %q: %w", resource, err)
			}
		}
		return tx.Set(doc, token{Lease: c.Lease, FencingToken: c.FencingToken})
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
