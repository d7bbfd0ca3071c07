package leasemcp_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/leasemcp"
)

// TestClaimNextExactlyOnce: five sessions claim 200 tasks with
// lease_claim_next, finishing each (lease_release done=true) as they go;
// every task is claimed exactly once, and once all are done a claim finds
// none free.
func TestClaimNextExactlyOnce(t *testing.T) {
	const sessions, tasks = 5, 200
	t0 := time.Now()
	svc := startService(t)
	sdk := sdkClient(t, svc)
	prefix := e2e.UniqueName("mcp.tasks") + ".t-"
	// The orchestrator publishes the tasks: a lease that exists (acquired
	// and released) under the prefix is a task.
	for i := range tasks {
		name := fmt.Sprintf("%s%03d", prefix, i)
		l, err := sdk.Acquire(context.Background(), name, client.AcquireRequest{Holder: "orchestrator", TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sdk.Release(context.Background(), name, "orchestrator", l.FencingToken); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("published %d tasks in %v", tasks, time.Since(t0))
	ss := make([]*session, sessions)
	for i := range ss {
		ss[i] = startSession(t, svc.URL, fmt.Sprintf("worker-%d", i), 10*time.Second)
	}
	var mu sync.Mutex
	claimedBy := map[string][]string{}
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	start := time.Now()
	t.Logf("started %d sessions after %v", sessions, time.Since(t0))
	for _, s := range ss {
		wg.Go(func() {
			for {
				var c leasemcp.ClaimOutput
				if err := s.call("lease_claim_next", map[string]any{"prefix": prefix}, &c); err != nil {
					errs <- err
					return
				}
				if !c.Claimed {
					if c.HeldByOthers > 0 {
						// The others' tasks may come back; a worker that
						// failed keeps its task held (its session renews
						// it), so give up after a while rather than spin
						// until the test binary's timeout.
						if time.Since(start) > 3*time.Minute {
							errs <- fmt.Errorf("%s: %d tasks still held by others after 3 min: %+v", s.holder, c.HeldByOthers, c)
							return
						}
						time.Sleep(20 * time.Millisecond)
						continue
					}
					if c.Done != tasks {
						errs <- fmt.Errorf("%s: nothing to claim, but %d of %d tasks done: %+v", s.holder, c.Done, tasks, c)
					}
					return
				}
				if c.FencingToken != 2 || len(c.Held) != 1 || c.Held[0].Name != c.Name {
					errs <- fmt.Errorf("%s: claim %+v: want the task's second holding, and only it held", s.holder, c)
					return
				}
				mu.Lock()
				claimedBy[c.Name] = append(claimedBy[c.Name], s.holder)
				mu.Unlock()
				var r leasemcp.ReleaseOutput
				if err := s.call("lease_release", map[string]any{"name": c.Name, "done": true}, &r); err != nil {
					errs <- err
					return
				}
				if !r.Released || !r.MarkedDone {
					errs <- fmt.Errorf("%s: release %s: %+v", s.holder, c.Name, r)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d sessions claimed %d tasks in %v", sessions, tasks, time.Since(start))
	perSession := map[string]int{}
	for i := range tasks {
		name := fmt.Sprintf("%s%03d", prefix, i)
		if len(claimedBy[name]) != 1 {
			t.Errorf("%s claimed %d times: %v", name, len(claimedBy[name]), claimedBy[name])
		}
		for _, h := range claimedBy[name] {
			perSession[h]++
		}
	}
	if len(claimedBy) != tasks {
		t.Errorf("%d distinct tasks claimed, want %d", len(claimedBy), tasks)
	}
	t.Logf("tasks per session: %v", perSession)
}

// TestClaimNextNames: with names, the candidates are those names in the
// given order (leases that need not exist yet); a task given back without
// done is claimed again, a done one never.
func TestClaimNextNames(t *testing.T) {
	svc := startService(t)
	prefix := e2e.UniqueName("mcp.named") + "."
	names := []string{prefix + "c", prefix + "a", prefix + "b"}
	a := startSession(t, svc.URL, "named-a", 10*time.Second)
	b := startSession(t, svc.URL, "named-b", 10*time.Second)
	claim := func(s *session) leasemcp.ClaimOutput {
		var c leasemcp.ClaimOutput
		s.mustCall("lease_claim_next", map[string]any{"prefix": prefix, "names": names}, &c)
		return c
	}
	if c := claim(a); !c.Claimed || c.Name != prefix+"c" || c.FencingToken != 1 {
		t.Fatalf("first claim: %+v", c)
	}
	if c := claim(b); !c.Claimed || c.Name != prefix+"a" {
		t.Fatalf("second claim: %+v", c)
	}
	// a gives its task back unfinished: b claims it next (it comes first).
	a.mustCall("lease_release", map[string]any{"name": prefix + "c"}, &leasemcp.ReleaseOutput{})
	if c := claim(b); !c.Claimed || c.Name != prefix+"c" || c.FencingToken != 2 {
		t.Fatalf("claim of the task given back: %+v", c)
	}
	for _, n := range []string{prefix + "c", prefix + "a"} {
		b.mustCall("lease_release", map[string]any{"name": n, "done": true}, &leasemcp.ReleaseOutput{})
	}
	if c := claim(a); !c.Claimed || c.Name != prefix+"b" {
		t.Fatalf("claim of the last task: %+v", c)
	}
	if c := claim(b); c.Claimed || c.Done != 2 || c.HeldByOthers != 1 {
		t.Fatalf("claim with two done and one held: %+v", c)
	}
	// Names outside the prefix, or done markers, are refused.
	var c leasemcp.ClaimOutput
	if err := a.call("lease_claim_next", map[string]any{"prefix": prefix, "names": []string{"other.x"}}, &c); err == nil {
		t.Fatal("a name outside the prefix was accepted")
	}
	if err := a.call("lease_claim_next", map[string]any{"prefix": prefix, "names": []string{prefix + "a.done"}}, &c); err == nil {
		t.Fatal("a done marker was accepted as a task")
	}
}
