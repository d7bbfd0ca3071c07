package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// The lifecycle cases of PROTOCOL.md ("The keeper's lifecycle"): L1–L4 as
// the Go SDK keeps them.

// lifecycleKeeper builds the keeper LEASE_KEEPER names: "plain" (TTL
// LEASE_TTL_MS) or, by default, a session of window 1000 ms.
func lifecycleKeeper(ctx context.Context, e env) (*client.Keeper, error) {
	cfg := client.KeeperConfig{Window: time.Second, TTL: e.ttl}
	if os.Getenv("LEASE_KEEPER") == "plain" {
		cfg = client.KeeperConfig{PlainRenewals: true, TTL: e.ttl}
	}
	k, err := client.NewKeeper(ctx, e.c, cfg)
	if err != nil {
		return nil, fmt.Errorf("keeper: %w", err)
	}
	return k, nil
}

// lifecycleLimit (L1): a keeper refused its session at the session limit
// holds with plain renewals, reason session_limit, and keeps that mode for
// its life.
func lifecycleLimit(ctx context.Context, e env) error {
	k, err := client.NewKeeper(ctx, e.c, client.KeeperConfig{Window: time.Second, TTL: e.ttl})
	if err != nil {
		return fmt.Errorf("keeper: %w", err)
	}
	defer k.Close()
	h, err := k.Hold(ctx, e.name, client.AcquireRequest{Holder: e.holder})
	if err != nil {
		return fmt.Errorf("hold: %w", err)
	}
	emit(map[string]any{"step": "held", "token": h.Token(), "mode": k.Mode(), "reason": k.PlainReason()})
	emit(map[string]any{"step": "waiting"})
	if !goLine(ctx) {
		return nil
	}
	h2, err := k.Hold(ctx, e.name+"-2", client.AcquireRequest{Holder: e.holder})
	if err != nil {
		return fmt.Errorf("hold %s-2: %w", e.name, err)
	}
	emit(map[string]any{"step": "held2", "token": h2.Token(), "mode": k.Mode()})
	k.Close()
	emit(map[string]any{"step": "done"})
	return nil
}

// lifecycleReopen (L2): an Elector and a holding over one session keeper;
// when the service ends the session, the holding ends lost, the term
// ends, and the keeper opens a new session for the Elector's next
// campaign.
func lifecycleReopen(ctx context.Context, e env) error {
	k, err := client.NewKeeper(ctx, e.c, client.KeeperConfig{Window: time.Second, TTL: e.ttl})
	if err != nil {
		return fmt.Errorf("keeper: %w", err)
	}
	defer k.Close()
	h, err := k.Hold(ctx, e.name+"-h", client.AcquireRequest{Holder: e.holder})
	if err != nil {
		return fmt.Errorf("hold %s-h: %w", e.name, err)
	}
	emit(map[string]any{"step": "holding", "token": h.Token()})
	go func() {
		select {
		case <-h.Done():
			emit(map[string]any{"step": "lost", "token": h.Token(), "error": codeOf(h.Err())})
		case <-ctx.Done():
		}
	}()
	el, err := client.NewElector(k, e.name, client.ElectorConfig{Holder: e.holder, Callbacks: client.LeaderCallbacks{
		OnStartedLeading: func(lctx context.Context) {
			tok, _ := client.TokenFromContext(lctx)
			emit(map[string]any{"step": "leading", "token": tok, "mode": k.Mode()})
			<-lctx.Done()
			if ctx.Err() == nil {
				emit(map[string]any{"step": "stopped"})
			}
		},
	}})
	if err != nil {
		return err
	}
	return el.Run(ctx)
}

// lifecycleCancel (L3): an Elector whose CancelBefore (LEASE_CANCEL_BEFORE_MS)
// does not fit the keeper's span is refused with invalid_argument; one
// that fits leads.
func lifecycleCancel(ctx context.Context, e env) error {
	ms, err := strconv.Atoi(os.Getenv("LEASE_CANCEL_BEFORE_MS"))
	if err != nil {
		return fmt.Errorf("LEASE_CANCEL_BEFORE_MS: %w", err)
	}
	k, err := lifecycleKeeper(ctx, e)
	if err != nil {
		return err
	}
	defer k.Close()
	el, err := client.NewElector(k, e.name, client.ElectorConfig{Holder: e.holder,
		CancelBefore: time.Duration(ms) * time.Millisecond,
		Callbacks: client.LeaderCallbacks{OnStartedLeading: func(lctx context.Context) {
			tok, _ := client.TokenFromContext(lctx)
			emit(map[string]any{"step": "leading", "token": tok})
			<-lctx.Done()
		}}})
	if errors.Is(err, client.ErrInvalid) {
		emit(map[string]any{"step": "refused", "error": codeOf(err), "message": err.Error()})
		return nil
	}
	if err != nil {
		return err
	}
	return el.Run(ctx)
}

// lifecycleRenewal (L4): the keeper renews what it hands out while its
// owner never renews, and closing it releases the holding and stops the
// renewals.
func lifecycleRenewal(ctx context.Context, e env) error {
	k, err := lifecycleKeeper(ctx, e)
	if err != nil {
		return err
	}
	defer k.Close()
	h, err := k.Hold(ctx, e.name, client.AcquireRequest{Holder: e.holder})
	if err != nil {
		return fmt.Errorf("hold: %w", err)
	}
	emit(map[string]any{"step": "held", "token": h.Token()})
	select {
	case <-time.After(3 * e.ttl):
	case <-ctx.Done():
		return nil
	}
	l, err := e.c.Get(ctx, e.name)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	emit(map[string]any{"step": "slept", "held": l.Held && l.Holder == e.holder, "token": l.FencingToken})
	if !goLine(ctx) {
		return nil
	}
	k.Close()
	emit(map[string]any{"step": "closed"})
	<-ctx.Done()
	return nil
}
