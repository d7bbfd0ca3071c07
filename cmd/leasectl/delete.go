package main

import "context"

// cmdDelete deletes a lease nobody holds (docs/contract.md §15) and prints
// it as it was.
func cmdDelete(ctx context.Context, e *env, args []string) error {
	fs := e.flags("delete")
	pos, err := parse(fs, args, "NAME")
	if err != nil {
		return err
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	l, err := c.Delete(ctx, pos[0])
	if err != nil {
		return err
	}
	return e.printLeases(l)
}
