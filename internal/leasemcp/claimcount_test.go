package leasemcp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/leasemcp"
)

// TestClaimNextCounts (issue 38 item 6): a claim that skipped a done task
// counts it (it said done: 0), and a claim that finds nothing free while
// this session still holds tasks says so and does not call the work
// finished; only when every task is done is it finished.
func TestClaimNextCounts(t *testing.T) {
	svc := startService(t)
	sdk := sdkClient(t, svc)
	prefix := e2e.UniqueName("mcp.count") + ".t-"
	for _, n := range []string{"a", "b", "c"} {
		l, err := sdk.Acquire(context.Background(), prefix+n, client.AcquireRequest{Holder: "orchestrator", TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sdk.Release(context.Background(), prefix+n, "orchestrator", l.FencingToken); err != nil {
			t.Fatal(err)
		}
	}
	s := startInProcess(t, svc.URL, "counter", 10*time.Second)
	claim := func() leasemcp.ClaimOutput {
		var c leasemcp.ClaimOutput
		s.mustCall("lease_claim_next", map[string]any{"prefix": prefix}, &c)
		return c
	}
	if c := claim(); !c.Claimed || c.Name != prefix+"a" {
		t.Fatalf("first claim: %+v", c)
	}
	s.mustCall("lease_release", map[string]any{"name": prefix + "a", "done": true}, &leasemcp.ReleaseOutput{})
	if c := claim(); !c.Claimed || c.Name != prefix+"b" || c.Done != 1 {
		t.Fatalf("the claim after a done task: %+v, want b claimed with done 1", c)
	}
	if c := claim(); !c.Claimed || c.Name != prefix+"c" || c.Done != 1 || c.HeldByYou != 1 {
		t.Fatalf("third claim: %+v, want c claimed, done 1, heldByYou 1", c)
	}
	c := claim()
	if c.Claimed || c.Done != 1 || c.HeldByYou != 2 || c.HeldByOthers != 0 {
		t.Fatalf("a claim with one task done and two held by this session: %+v", c)
	}
	if strings.Contains(c.Instructions, "work is finished") || !strings.Contains(c.Instructions, "not finished") {
		t.Fatalf("with two tasks still held by this session the claim says: %s", c.Instructions)
	}
	for _, n := range []string{"b", "c"} {
		s.mustCall("lease_release", map[string]any{"name": prefix + n, "done": true}, &leasemcp.ReleaseOutput{})
	}
	if c := claim(); c.Claimed || c.Done != 3 || c.HeldByYou != 0 || !strings.Contains(c.Instructions, "work is finished") {
		t.Fatalf("a claim with every task done: %+v", c)
	}
}
