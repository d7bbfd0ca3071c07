package client

import (
	"context"
	"net/http"
)

// Delete removes the lease name, which nobody may hold or have reserved
// (DELETE /v1/leases/{name}, docs/contract.md §15), and returns the lease
// as it was. A held lease is a *HeldError (ErrHeld) and a reserved one a
// *ReservedError (ErrReserved), each with the lease; one that never existed, or is already
// deleted, is ErrNotFound. Its fencing token is never reused: the next
// Acquire of the name gets the deleted token + 1. With authentication on it
// needs the delete verb (or admin) on the name. A delete is retried only
// when the service did not act on it (429, no connection); after a failure
// that may have deleted it, an ErrNotFound of a second Delete means it is
// gone.
func (c *Client) Delete(ctx context.Context, name string) (Lease, error) {
	var l Lease
	err := c.call(ctx, "delete", name, http.MethodDelete, leasePath(name, ""), nil, &l, callOpts{notIdempotent: true})
	return l, err
}
