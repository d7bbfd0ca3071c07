package main

import (
	"context"

	"github.com/leasesvc/leasesvc/client"
)

// cmdDelete deletes a lease nobody holds (docs/contract.md §15) and prints
// it as it was.
func cmdDelete(ctx context.Context, e *env, args []string) error {
	return onName(ctx, e, args, "delete", (*client.Client).Delete)
}
