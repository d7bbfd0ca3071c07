package leasemcp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/leasemcp"
)

// startInProcess runs a Server in this process against url and connects
// an MCP client to it, with its logging notifications on the session's
// logs; the server stops at the end of the test.
func startInProcess(t *testing.T, url, holder string, ttl time.Duration) *session {
	t.Helper()
	sdk, err := client.New(url, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := leasemcp.New(sdk, leasemcp.Config{Holder: holder, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx, st) }()
	s := &session{t: t, holder: holder, stderr: &e2e.SyncBuffer{}, update: make(chan string, 100)}
	//lint:ignore SA1019 the server still sends logging notifications (see notifyLost)
	s.logs = make(chan *mcp.LoggingMessageParams, 100)
	c := mcp.NewClient(&mcp.Implementation{Name: "succession-test", Version: "1"}, &mcp.ClientOptions{
		//lint:ignore SA1019 the server still sends logging notifications (see notifyLost)
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			select {
			case s.logs <- r.Params:
			default:
			}
		},
	})
	if s.cs, err = c.Connect(context.Background(), ct, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-ran:
		case <-time.After(15 * time.Second):
			t.Error("Run did not return within 15s of its ctx's end")
		}
	})
	return s
}

// checkpointOf decodes a lease's checkpoint.
func checkpointOf(t *testing.T, l client.Lease) map[string]any {
	t.Helper()
	var cp map[string]any
	if len(l.Checkpoint) > 0 {
		if err := json.Unmarshal(l.Checkpoint, &cp); err != nil {
			t.Fatalf("checkpoint %s: %v", l.Checkpoint, err)
		}
	}
	return cp
}

// TestReservedAndInheritedCheckpoint: an acquire refused because another
// holder's transfer reserved the lease is reported like lease_held
// (acquired=false, reservedFor, retryAfterSeconds, instructions), not as a
// tool error; once the reservation lapses, a waiting acquire gets the lease
// with the checkpoint the previous holder left, and says so.
func TestReservedAndInheritedCheckpoint(t *testing.T) {
	svc := startService(t)
	sdk := sdkClient(t, svc)
	ctx := context.Background()
	name := e2e.UniqueName("mcp.reserved")
	l, err := sdk.Acquire(ctx, name, client.AcquireRequest{Holder: "prev", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdk.Transfer(ctx, name, client.TransferRequest{Holder: "prev", FencingToken: l.FencingToken, To: "heir",
		Checkpoint: json.RawMessage(`{"step":3}`), Reserve: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	a := startInProcess(t, svc.URL, "agent-res", 3*time.Second)
	var acq leasemcp.AcquireOutput
	a.mustCall("lease_acquire", map[string]any{"name": name}, &acq)
	if acq.Acquired || acq.ReservedFor != "heir" || acq.ReservedUntil == "" || acq.RetryAfterSeconds < 1 ||
		acq.FencingToken != 0 || acq.Holder != "" || len(acq.Held) != 0 ||
		!strings.Contains(acq.Instructions, "reserved for \"heir\"") || !strings.Contains(acq.Instructions, "do not act on it") {
		t.Fatalf("acquire of a reserved lease: %+v", acq)
	}

	// "heir" never comes: a waiting acquire gets it once the reservation
	// lapses, with the checkpoint of holding 1.
	a.mustCall("lease_acquire", map[string]any{"name": name, "waitSeconds": 10}, &acq)
	if !acq.Acquired || acq.FencingToken != 2 || acq.CheckpointToken != 1 || acq.Checkpoint["step"] != 3.0 ||
		!strings.Contains(acq.Instructions, "last progress recorded by a previous holder") {
		t.Fatalf("acquire after the reservation: %+v", acq)
	}
}

// TestCheckpointAndYield: priority is recorded on the holding;
// lease_checkpoint stores a checkpoint at once; a preempting candidate of
// higher priority shows as a yield request in every result (and a logging
// notification) while the session keeps the lease — it never steps down
// by itself — and lease_release with a checkpoint hands the candidate the
// lease with that checkpoint.
func TestCheckpointAndYield(t *testing.T) {
	svc := startService(t)
	sdk := sdkClient(t, svc)
	ctx := context.Background()
	name := e2e.UniqueName("mcp.yield")
	a := startInProcess(t, svc.URL, "agent-low", 2*time.Second)
	//lint:ignore SA1019 the server still sends logging notifications (see notifyLost)
	if err := a.cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
		t.Fatal(err)
	}

	// Bad succession arguments are tool errors.
	var acq leasemcp.AcquireOutput
	if err := a.call("lease_acquire", map[string]any{"name": name, "priority": 1001}, &acq); err == nil {
		t.Fatal("lease_acquire with priority 1001 succeeded")
	}
	if err := a.call("lease_acquire", map[string]any{"name": name, "priority": 5, "preempt": true}, &acq); err == nil ||
		!strings.Contains(err.Error(), "waitSeconds") {
		t.Fatalf("lease_acquire with preempt and no waitSeconds: %v", err)
	}
	var cpo leasemcp.CheckpointOutput
	if err := a.call("lease_checkpoint", map[string]any{"name": name, "checkpoint": map[string]any{"n": 0}}, &cpo); err == nil ||
		!strings.Contains(err.Error(), "does not hold") {
		t.Fatalf("lease_checkpoint of a lease not held: %v", err)
	}

	a.mustCall("lease_acquire", map[string]any{"name": name, "priority": 1}, &acq)
	if !acq.Acquired || acq.FencingToken != 1 || acq.Priority != 1 || acq.Checkpoint != nil {
		t.Fatalf("acquire with priority 1: %+v", acq)
	}
	a.mustCall("lease_checkpoint", map[string]any{"name": name, "checkpoint": map[string]any{"n": 1}}, &cpo)
	if !cpo.Written || cpo.FencingToken != 1 || cpo.CheckpointToken != 1 || cpo.YieldRequested || len(cpo.Held) != 1 {
		t.Fatalf("lease_checkpoint: %+v", cpo)
	}
	if l, err := sdk.Get(ctx, name); err != nil || checkpointOf(t, l)["n"] != 1.0 || l.CheckpointToken != 1 || l.Priority != 1 {
		t.Fatalf("the lease after lease_checkpoint: %+v, %v", l, err)
	}
	big := map[string]any{"blob": strings.Repeat("x", client.MaxCheckpointBytes)}
	if err := a.call("lease_checkpoint", map[string]any{"name": name, "checkpoint": big}, &cpo); err == nil ||
		!strings.Contains(err.Error(), "more than") {
		t.Fatalf("lease_checkpoint of more than 16 KiB: %v", err)
	}

	// A preempting candidate of priority 9 waits.
	type answer struct {
		l   client.Lease
		err error
	}
	got := make(chan answer, 1)
	go func() {
		l, err := sdk.Acquire(ctx, name, client.AcquireRequest{Holder: "boss", TTL: 5 * time.Second,
			Wait: 20 * time.Second, Priority: 9, Preempt: true})
		got <- answer{l, err}
	}()
	var held leasemcp.HeldOutput
	waitFor(t, 10*time.Second, func() bool {
		a.mustCall("lease_held", map[string]any{}, &held)
		return len(held.YieldRequests) == 1
	})
	if y := held.YieldRequests[0]; y != (leasemcp.YieldRequest{Name: name, FencingToken: 1, YieldTo: "boss"}) ||
		!strings.Contains(held.Warning, "YIELD REQUESTED") || !strings.Contains(held.Warning, "lease_checkpoint") ||
		len(held.Leases) != 1 || held.Leases[0].YieldTo != "boss" || held.Leases[0].Priority != 1 {
		t.Fatalf("lease_held with a yield request: %+v", held)
	}
	select {
	case m := <-a.logs:
		b, _ := json.Marshal(m.Data)
		if m.Level != "warning" || !strings.Contains(string(b), `"yield_requested"`) || !strings.Contains(string(b), "boss") {
			t.Fatalf("logging notification: %s %s", m.Level, b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no logging notification of the yield request")
	}

	// The session does not step down: after more than a TTL it still holds
	// the lease, and the candidate still waits.
	time.Sleep(2500 * time.Millisecond)
	if l, err := sdk.Get(ctx, name); err != nil || !l.Held || l.Holder != "agent-low" || l.FencingToken != 1 || !l.YieldRequested {
		t.Fatalf("the lease 2.5s after the yield request: %+v, %v", l, err)
	}
	select {
	case r := <-got:
		t.Fatalf("the candidate got an answer while the session held the lease: %+v %v", r.l, r.err)
	default:
	}
	var g leasemcp.GetOutput
	a.mustCall("lease_get", map[string]any{"name": name}, &g)
	if !g.Lease.HeldByMe || !g.Lease.YieldRequested || g.Lease.YieldTo != "boss" || g.Lease.Candidates != 1 || len(g.YieldRequests) != 1 {
		t.Fatalf("lease_get with a yield request: %+v", g)
	}
	a.mustCall("lease_checkpoint", map[string]any{"name": name, "checkpoint": map[string]any{"n": 1.5}}, &cpo)
	if !cpo.YieldRequested || cpo.YieldTo != "boss" || !strings.Contains(cpo.Instructions, "lease_release") {
		t.Fatalf("lease_checkpoint with a yield request: %+v", cpo)
	}

	var rel leasemcp.ReleaseOutput
	a.mustCall("lease_release", map[string]any{"name": name, "checkpoint": map[string]any{"n": 2}}, &rel)
	if !rel.Released || !rel.CheckpointWritten || len(rel.Held) != 0 || len(rel.YieldRequests) != 0 || rel.Warning != "" {
		t.Fatalf("release with a checkpoint: %+v", rel)
	}
	select {
	case r := <-got:
		if r.err != nil || r.l.Holder != "boss" || r.l.FencingToken != 2 || r.l.CheckpointToken != 1 || checkpointOf(t, r.l)["n"] != 2.0 {
			t.Fatalf("the candidate after the release: %+v, %v", r.l, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the candidate did not get the lease after the release")
	}
}

// TestPriorityWaitIsCandidate: a waiting lease_acquire with a priority is
// a registered candidate while it waits, and gets the lease when the
// holding ends.
func TestPriorityWaitIsCandidate(t *testing.T) {
	svc := startService(t)
	sdk := sdkClient(t, svc)
	ctx := context.Background()
	name := e2e.UniqueName("mcp.cand")
	l, err := sdk.Acquire(ctx, name, client.AcquireRequest{Holder: "other", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a := startInProcess(t, svc.URL, "agent-cand", 3*time.Second)
	done := make(chan leasemcp.AcquireOutput, 1)
	go func() {
		var out leasemcp.AcquireOutput
		if err := a.call("lease_acquire", map[string]any{"name": name, "waitSeconds": 15, "priority": 0}, &out); err != nil {
			t.Error(err)
		}
		done <- out
	}()
	waitFor(t, 5*time.Second, func() bool {
		g, err := sdk.Get(ctx, name)
		return err == nil && g.Candidates == 1
	})
	if _, err := sdk.Release(ctx, name, "other", l.FencingToken); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-done:
		if !out.Acquired || out.FencingToken != 2 || out.Holder != "agent-cand" {
			t.Fatalf("the waiting candidate: %+v", out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting candidate did not get the lease")
	}
}

// TestClaimSkipsReservedTask: lease_claim_next does not hand out a free
// task reserved for another holder; it counts it with heldByOthers, and
// claims it once the reservation has lapsed.
func TestClaimSkipsReservedTask(t *testing.T) {
	svc := startService(t)
	sdk := sdkClient(t, svc)
	ctx := context.Background()
	prefix := e2e.UniqueName("mcp.rtask") + "."
	task := prefix + "t1"
	l, err := sdk.Acquire(ctx, task, client.AcquireRequest{Holder: "orch", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdk.Transfer(ctx, task, client.TransferRequest{Holder: "orch", FencingToken: l.FencingToken, To: "heir",
		Reserve: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	a := startInProcess(t, svc.URL, "agent-claim", 3*time.Second)
	for _, args := range []map[string]any{{"prefix": prefix}, {"prefix": prefix, "names": []string{task}}} {
		var c leasemcp.ClaimOutput
		a.mustCall("lease_claim_next", args, &c)
		if c.Claimed || c.HeldByOthers != 1 || len(c.Held) != 0 {
			t.Fatalf("claim %v of a reserved task: %+v", args, c)
		}
	}
	var c leasemcp.ClaimOutput
	waitFor(t, 10*time.Second, func() bool {
		a.mustCall("lease_claim_next", map[string]any{"prefix": prefix}, &c)
		return c.Claimed
	})
	if c.Name != task || c.FencingToken != 2 {
		t.Fatalf("claim after the reservation: %+v", c)
	}
}
