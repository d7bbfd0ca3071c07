package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// keeperCase runs the keeper case of PROTOCOL.md: a client.Keeper in the
// mode LEASE_KEEPER names holds the lease, moves its deadline by itself,
// writes a checkpoint, reports the loss a revoke causes, holds the lease
// again and releases it with a checkpoint.
func keeperCase(ctx context.Context, e env) error {
	mode := os.Getenv("LEASE_KEEPER")
	k, err := client.NewKeeper(ctx, e.c, client.KeeperConfig{PlainRenewals: mode == "plain", Window: time.Second, TTL: e.ttl})
	if err != nil {
		return fmt.Errorf("keeper: %w", err)
	}
	defer k.Close()
	emit(map[string]any{"step": "keeper", "mode": k.Mode()})

	hold := func() (client.Holding, error) {
		h, err := k.Hold(ctx, e.name, client.AcquireRequest{Holder: e.holder})
		if err != nil {
			return nil, fmt.Errorf("hold: %w", err)
		}
		if !h.Fresh(ctx, 0) {
			return nil, fmt.Errorf("hold: the holding ended at once: %w", h.Err())
		}
		emit(map[string]any{"step": "held", "token": h.Token(), "mode": k.Mode(), "aheadMs": time.Until(h.Deadline()).Milliseconds()})
		return h, nil
	}
	h, err := hold()
	if err != nil {
		return err
	}
	for first := h.Deadline(); !h.Deadline().After(first); {
		select {
		case <-h.Changed():
		case <-h.Done():
			return fmt.Errorf("moved: %w", h.Err())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	emit(map[string]any{"step": "moved", "token": h.Token(), "aheadMs": time.Until(h.Deadline()).Milliseconds()})

	r, err := h.Renew(ctx, client.RenewRequest{Checkpoint: json.RawMessage(`{"n":1}`)})
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	n, err := checkpointN(r)
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "checkpoint", "token": r.FencingToken, "checkpointN": n})

	select {
	case <-h.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	emit(map[string]any{"step": "lost", "token": h.Token(), "error": codeOf(h.Err())})

	if h, err = hold(); err != nil {
		return err
	}
	l, err := h.Release(ctx, json.RawMessage(`{"n":2}`))
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if n, err = checkpointN(l); err != nil {
		return err
	}
	emit(map[string]any{"step": "released", "held": l.Held, "checkpointN": n})
	emit(map[string]any{"step": "done"})
	return nil
}
