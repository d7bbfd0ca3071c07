package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
)

// ExampleManager_Delete: a lease nobody holds is deleted and is then not
// found, but its fencing token lives on in a tombstone: the name's next
// holding gets the next token (docs/contract.md §15).
func ExampleManager_Delete() {
	ctx := context.Background()
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	l, _ := m.Acquire(ctx, lease.AcquireRequest{Name: "team-a.report", Holder: "agent-1", TTL: time.Minute})
	if _, err := m.Delete(ctx, lease.DeleteRequest{Name: "team-a.report"}); errors.Is(err, lease.ErrHeld) {
		fmt.Println("held: not deleted")
	}
	_, _ = m.Release(ctx, lease.ReleaseRequest{Name: "team-a.report", Holder: "agent-1", FencingToken: l.FencingToken})
	d, _ := m.Delete(ctx, lease.DeleteRequest{Name: "team-a.report"})
	fmt.Println("deleted holding", d.FencingToken, "of", d.Holder)
	if _, err := m.Get(ctx, "team-a.report"); errors.Is(err, lease.ErrNotFound) {
		fmt.Println("get: not found")
	}
	l, _ = m.Acquire(ctx, lease.AcquireRequest{Name: "team-a.report", Holder: "agent-2", TTL: time.Minute})
	fmt.Println("next token:", l.FencingToken)
	// Output:
	// held: not deleted
	// deleted holding 1 of agent-1
	// get: not found
	// next token: 2
}
