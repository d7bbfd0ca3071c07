package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasesvc/leasesvc/client"
)

// cmdDelete deletes a lease nobody holds (docs/contract.md §15) and prints
// it as it was. A lease that is held or reserved is refused in one
// sentence that says what to do first.
func cmdDelete(ctx context.Context, e *env, args []string) error {
	err := onName(ctx, e, args, "delete", (*client.Client).Delete)
	var held *client.HeldError
	var reserved *client.ReservedError
	switch {
	case errors.As(err, &held):
		l := held.Lease
		return &exitError{code: exitHeld, err: fmt.Errorf("delete: %q is held by %q (fencing token %d): release it first (leasectl release %s --holder %s --fencing-token %d), or end the holding as an operator with leasectl revoke; %w",
			l.Name, l.Holder, l.FencingToken, l.Name, l.Holder, l.FencingToken, errHeldOnly)}
	case errors.As(err, &reserved):
		return &exitError{code: exitHeld, err: fmt.Errorf("delete: %q is reserved for %q until %s: wait for its holding or the reservation to end first; %w",
			reserved.Lease.Name, reserved.ReservedFor, reserved.ReservedUntil.UTC().Format("2006-01-02T15:04:05.000Z"), errHeldOnly)}
	case errors.Is(err, client.ErrHeld):
		return &exitError{code: exitHeld, err: fmt.Errorf("delete: the lease is held: release it first, or end the holding as an operator with leasectl revoke; %w", errHeldOnly)}
	}
	return err
}

// errHeldOnly ends the message of a refused delete: only a free lease is
// deleted.
var errHeldOnly = errors.New("only a lease nobody holds can be deleted")
