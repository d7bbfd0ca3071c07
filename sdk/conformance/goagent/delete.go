package main

import (
	"context"

	"github.com/leasesvc/leasesvc/client"
)

// deleteCase is the "delete" case of PROTOCOL.md (docs/contract.md §15).
func deleteCase(ctx context.Context, e env) error {
	a, b := e.holder, e.holder+"-b"
	l, err := e.c.Acquire(ctx, e.name, client.AcquireRequest{Holder: a, TTL: e.ttl})
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "acquire", "token": l.FencingToken})
	if err := expectError("delete_held", func() error { _, err := e.c.Delete(ctx, e.name); return err }); err != nil {
		return err
	}
	r, err := e.c.Release(ctx, e.name, a, l.FencingToken)
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "release", "held": r.Held})
	d, err := e.c.Delete(ctx, e.name)
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "delete", "holder": d.Holder, "token": d.FencingToken, "held": d.Held})
	if err := expectError("get_deleted", func() error { _, err := e.c.Get(ctx, e.name); return err }); err != nil {
		return err
	}
	if err := expectError("delete_again", func() error { _, err := e.c.Delete(ctx, e.name); return err }); err != nil {
		return err
	}
	o, err := e.c.Acquire(ctx, e.name, client.AcquireRequest{Holder: b, TTL: e.ttl})
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "acquire_after", "holder": o.Holder, "token": o.FencingToken})
	emit(map[string]any{"step": "done"})
	return nil
}
