package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
)

// A leader acquires a lease, renews it, and releases it; a follower learns
// who leads from the refusal; the next holding gets the next fencing token.
func Example() {
	ctx := context.Background()
	clock := memory.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m, err := lease.NewManager(memory.New(memory.WithClock(clock.Now)), lease.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}

	l, _ := m.Acquire(ctx, lease.AcquireRequest{Name: "team-a.scheduler", Holder: "agent-1", TTL: 30 * time.Second})
	fmt.Println("leader:", l.Holder, "token:", l.FencingToken, "until:", l.ExpireTime.Format(time.TimeOnly))

	_, err = m.Acquire(ctx, lease.AcquireRequest{Name: "team-a.scheduler", Holder: "agent-2", TTL: 30 * time.Second})
	var held *lease.HeldError
	if errors.As(err, &held) {
		fmt.Println("agent-2 follows", held.Lease.Holder, "for", held.Lease.Remaining())
	}

	clock.Advance(10 * time.Second)
	l, _ = m.Renew(ctx, lease.RenewRequest{Name: "team-a.scheduler", Holder: "agent-1", FencingToken: l.FencingToken})
	fmt.Println("renewed until:", l.ExpireTime.Format(time.TimeOnly))

	_, _ = m.Release(ctx, lease.ReleaseRequest{Name: "team-a.scheduler", Holder: "agent-1", FencingToken: l.FencingToken})
	l, _ = m.Acquire(ctx, lease.AcquireRequest{Name: "team-a.scheduler", Holder: "agent-2", TTL: 30 * time.Second})
	fmt.Println("leader:", l.Holder, "token:", l.FencingToken)

	_, err = m.Renew(ctx, lease.RenewRequest{Name: "team-a.scheduler", Holder: "agent-1", FencingToken: 1})
	fmt.Println("agent-1 renews:", errors.Is(err, lease.ErrLost))
	// Output:
	// leader: agent-1 token: 1 until: 00:00:30
	// agent-2 follows agent-1 for 30s
	// renewed until: 00:00:40
	// leader: agent-2 token: 2
	// agent-1 renews: true
}
