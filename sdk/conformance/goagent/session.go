package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// session runs the session case of PROTOCOL.md (docs/contract.md §14) with
// package client: a session of window 1s whose deadline follows the
// acknowledged heartbeats, an acquire through it (the lease says
// session-held, a plain renew is refused), a checkpoint and a release over
// it, then a holding left to the driver, which kills the agent and sees
// the lease free within the window.
func session(ctx context.Context, e env) error {
	a, b := e.holder, e.holder+"-b"
	s, err := e.c.OpenSession(ctx, client.SessionConfig{Window: time.Second})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	emit(map[string]any{"step": "opened", "windowMs": s.Window().Milliseconds()})

	for s.Deadline().IsZero() { // the first heartbeat goes out at once
		time.Sleep(5 * time.Millisecond)
	}
	emit(map[string]any{"step": "deadline", "aheadMs": time.Until(s.Deadline()).Milliseconds()})

	l, err := s.Acquire(ctx, e.name, client.AcquireRequest{Holder: a})
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	emit(map[string]any{"step": "acquire", "holder": l.Holder, "token": l.FencingToken, "held": l.Held,
		"session": l.Session, "sessionWindowMs": l.SessionWindow.Milliseconds()})

	if err := expectError("renew_plain", func() error {
		_, err := e.c.Renew(ctx, e.name, client.RenewRequest{Holder: a, FencingToken: l.FencingToken})
		return err
	}); err != nil {
		return err
	}
	if err := expectError("acquire_other", func() error {
		_, err := e.c.Acquire(ctx, e.name, client.AcquireRequest{Holder: b, TTL: e.ttl})
		return err
	}); err != nil {
		return err
	}

	r, err := s.Renew(ctx, e.name, client.RenewRequest{Holder: a, FencingToken: l.FencingToken, Checkpoint: json.RawMessage(`{"n":1}`)})
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	n, err := checkpointN(r)
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "checkpoint", "token": r.FencingToken, "checkpointN": n})

	rl, err := s.ReleaseWith(ctx, e.name, client.ReleaseRequest{Holder: a, FencingToken: l.FencingToken, Checkpoint: json.RawMessage(`{"n":2}`)})
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if n, err = checkpointN(rl); err != nil {
		return err
	}
	emit(map[string]any{"step": "release", "held": rl.Held, "checkpointN": n})

	h, err := s.Acquire(ctx, e.name, client.AcquireRequest{Holder: a})
	if err != nil {
		return fmt.Errorf("acquire again: %w", err)
	}
	emit(map[string]any{"step": "holding", "token": h.FencingToken})
	<-ctx.Done() // the driver kills the agent here; a stop closes the session
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Close(cctx)
}
