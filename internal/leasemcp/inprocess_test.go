package leasemcp_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/leasemcp"
)

// TestInProcess runs the Server in this process (so that -race sees it)
// with concurrent tool calls, a holding lost behind its back, and a
// cancelled ctx, which must release everything held.
func TestInProcess(t *testing.T) {
	svc := e2e.StartService(t, serviceEnv)
	sdk, err := client.New(svc.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := leasemcp.New(sdk, leasemcp.Config{Holder: "inproc", TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "inproc-test", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &session{t: t, holder: "inproc", cs: cs, stderr: &e2e.SyncBuffer{}}

	prefix := e2e.UniqueName("mcp.inproc") + "."
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			name := fmt.Sprintf("%sg%d", prefix, g)
			for range 3 {
				var acq leasemcp.AcquireOutput
				if err := s.call("lease_acquire", map[string]any{"name": name}, &acq); err != nil || !acq.Acquired {
					t.Errorf("acquire %s: %+v %v", name, acq, err)
					return
				}
				var held leasemcp.HeldOutput
				if err := s.call("lease_held", map[string]any{}, &held); err != nil {
					t.Error(err)
				}
				var rel leasemcp.ReleaseOutput
				if err := s.call("lease_release", map[string]any{"name": name}, &rel); err != nil || !rel.Released {
					t.Errorf("release %s: %+v %v", name, rel, err)
				}
			}
		})
	}
	wg.Wait()
	// Claims scan every name under the prefix, so they start once the
	// loops above are done with theirs (a claim beside a loop's call on
	// the same lease is refused as busy, by design).
	for range 4 {
		wg.Go(func() {
			var c leasemcp.ClaimOutput
			if err := s.call("lease_claim_next", map[string]any{"prefix": prefix}, &c); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()

	// A holding ended behind the session's back is reported as lost.
	lostName := prefix + "lost"
	var acq leasemcp.AcquireOutput
	s.mustCall("lease_acquire", map[string]any{"name": lostName}, &acq)
	if _, err := sdk.Release(context.Background(), lostName, "inproc", acq.FencingToken); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool {
		var held leasemcp.HeldOutput
		s.mustCall("lease_held", map[string]any{}, &held)
		return len(held.LostLeases) == 1 && held.LostLeases[0].Name == lostName
	})
	var held leasemcp.HeldOutput
	s.mustCall("lease_held", map[string]any{}, &held)
	if len(held.Held) == 0 {
		t.Fatal("the claims hold nothing")
	}

	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15s of its ctx's end")
	}
	for _, h := range held.Held {
		l, err := sdk.Get(context.Background(), h.Name)
		if err != nil || l.Held {
			t.Errorf("%s after the session ended: %+v %v", h.Name, l, err)
		}
	}
}
