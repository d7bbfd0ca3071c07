package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// checkpointN is the "n" member of a lease's checkpoint (a JSON number, as
// the line reports it), 0 without a checkpoint or without that member.
func checkpointN(l client.Lease) (any, error) {
	if len(l.Checkpoint) == 0 {
		return 0, nil
	}
	var cp map[string]any
	if err := json.Unmarshal(l.Checkpoint, &cp); err != nil {
		return nil, fmt.Errorf("lease %q: checkpoint %s: %w", l.Name, l.Checkpoint, err)
	}
	if n, ok := cp["n"]; ok {
		return n, nil
	}
	return 0, nil
}

// succession runs the succession case of PROTOCOL.md (docs/contract.md §8)
// with package client: a priority recorded on the holding, a transfer with
// a checkpoint, a third party's typed lease_reserved refusal, the
// successor inheriting the checkpoint, and a renew answering YieldRequested
// while the driver's preempting candidate waits.
func succession(ctx context.Context, e env) error {
	a, b, c := e.holder, e.holder+"-b", e.holder+"-c"
	l, err := e.c.Acquire(ctx, e.name, client.AcquireRequest{Holder: a, TTL: e.ttl, Priority: 7})
	if err != nil {
		return fmt.Errorf("acquire_priority: %w", err)
	}
	emit(map[string]any{"step": "acquire_priority", "token": l.FencingToken, "priority": l.Priority})

	t, err := e.c.Transfer(ctx, e.name, client.TransferRequest{Holder: a, FencingToken: l.FencingToken, To: b,
		Checkpoint: json.RawMessage(`{"n":1}`), Reserve: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	emit(map[string]any{"step": "transfer", "held": t.Held, "reservedFor": t.ReservedFor})

	_, err = e.c.Acquire(ctx, e.name, client.AcquireRequest{Holder: c, TTL: e.ttl})
	if err == nil {
		emit(map[string]any{"step": "acquire_reserved", "error": "none"})
		return errors.New("acquire_reserved: no error")
	}
	line := map[string]any{"step": "acquire_reserved", "error": codeOf(err)}
	var re *client.ReservedError
	if errors.As(err, &re) {
		line["reservedFor"] = re.ReservedFor
	}
	emit(line)

	s, err := e.c.Acquire(ctx, e.name, client.AcquireRequest{Holder: b, TTL: e.ttl})
	if err != nil {
		return fmt.Errorf("successor: %w", err)
	}
	n, err := checkpointN(s)
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "successor", "holder": s.Holder, "token": s.FencingToken, "checkpointN": n, "checkpointToken": s.CheckpointToken})

	y := e.name + "-yield"
	h, err := e.c.Acquire(ctx, y, client.AcquireRequest{Holder: a, TTL: e.ttl, Priority: 1})
	if err != nil {
		return fmt.Errorf("holding: %w", err)
	}
	emit(map[string]any{"step": "holding", "token": h.FencingToken, "priority": h.Priority})
	deadline := time.Now().Add(10 * time.Second)
	var r client.Lease
	for {
		if r, err = e.c.Renew(ctx, y, client.RenewRequest{Holder: a, FencingToken: h.FencingToken}); err != nil {
			return fmt.Errorf("yield_requested: %w", err)
		}
		if r.YieldRequested || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	emit(map[string]any{"step": "yield_requested", "yieldRequested": r.YieldRequested, "yieldTo": r.YieldTo, "candidates": r.Candidates})

	rel, err := e.c.ReleaseWith(ctx, y, client.ReleaseRequest{Holder: a, FencingToken: h.FencingToken,
		Checkpoint: json.RawMessage(`{"n":2}`)})
	if err != nil {
		return fmt.Errorf("released: %w", err)
	}
	if n, err = checkpointN(rel); err != nil {
		return err
	}
	emit(map[string]any{"step": "released", "held": rel.Held, "checkpointN": n})
	emit(map[string]any{"step": "done"})
	return nil
}
