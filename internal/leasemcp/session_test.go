package leasemcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/leasemcp"
)

// TestSession: initialize, tools with valid schemas, acquire → token 1, a
// second session → held, release, the second session's acquire → token 2,
// and the end of a session (stdin closed) releases what it holds.
func TestSession(t *testing.T) {
	svc := startService(t)
	sdk := sdkClient(t, svc)
	name := e2e.UniqueName("mcp.session")
	a := startSession(t, svc.URL, "agent-a", 10*time.Second)

	init := a.cs.InitializeResult()
	if init.ServerInfo.Name != "leasectl" || init.Capabilities.Tools == nil || init.Capabilities.Resources == nil ||
		!strings.Contains(init.Instructions, "fencingToken") {
		t.Fatalf("initialize: server %+v, capabilities %+v, instructions %q", init.ServerInfo, init.Capabilities, init.Instructions)
	}
	tools, err := a.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	outSchemas := map[string]*jsonschema.Resolved{}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if len(tl.Description) < 80 {
			t.Errorf("%s: description %q is too thin for an LLM", tl.Name, tl.Description)
		}
		resolve(t, tl.Name, "input", tl.InputSchema)
		outSchemas[tl.Name] = resolve(t, tl.Name, "output", tl.OutputSchema)
	}
	slices.Sort(names)
	want := []string{"lease_acquire", "lease_checkpoint", "lease_claim_next", "lease_get", "lease_held", "lease_list", "lease_release"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	// acquire → token 1; the result validates against the output schema.
	var acq leasemcp.AcquireOutput
	res := callRaw(t, a, "lease_acquire", map[string]any{"name": name})
	if err := outSchemas["lease_acquire"].Validate(res.StructuredContent); err != nil {
		t.Fatalf("lease_acquire result does not match its output schema: %v", err)
	}
	a.mustCall("lease_acquire", map[string]any{"name": name}, &acq)
	if !acq.Acquired || acq.FencingToken != 1 || acq.Holder != "agent-a" || !acq.AlreadyHeld ||
		!strings.Contains(acq.Instructions, "fencing token 1") {
		t.Fatalf("acquire again: %+v", acq)
	}
	if len(acq.Held) != 1 || acq.Held[0].Name != name || acq.Held[0].FencingToken != 1 {
		t.Fatalf("held after acquire: %+v", acq.Held)
	}

	// A bad name is a tool error naming the rule, and the schema says so too.
	if err := a.call("lease_acquire", map[string]any{"name": "bad name"}, &acq); err == nil {
		t.Fatal("lease_acquire of \"bad name\" succeeded")
	}
	if err := a.call("lease_acquire", map[string]any{"name": "x", "waitSeconds": 61}, &acq); err == nil {
		t.Fatal("lease_acquire with waitSeconds 61 succeeded")
	}

	// A second session is refused and told who holds it.
	b := startSession(t, svc.URL, "agent-b", 10*time.Second)
	var bacq leasemcp.AcquireOutput
	b.mustCall("lease_acquire", map[string]any{"name": name}, &bacq)
	if bacq.Acquired || bacq.Holder != "agent-a" || bacq.FencingToken != 0 || len(bacq.Held) != 0 {
		t.Fatalf("second session's acquire: %+v", bacq)
	}

	// get and list say whose it is.
	var got leasemcp.GetOutput
	a.mustCall("lease_get", map[string]any{"name": name}, &got)
	if !got.Exists || !got.Lease.HeldByMe || got.Lease.FencingToken != 1 || got.Lease.Holder != "agent-a" {
		t.Fatalf("get: %+v", got)
	}
	var bgot leasemcp.GetOutput
	b.mustCall("lease_get", map[string]any{"name": name}, &bgot)
	if bgot.Lease == nil || bgot.Lease.HeldByMe || !bgot.Lease.Held {
		t.Fatalf("get by the other session: %+v", bgot)
	}
	var missing leasemcp.GetOutput
	a.mustCall("lease_get", map[string]any{"name": name + "-missing"}, &missing)
	if missing.Exists {
		t.Fatalf("get of a missing lease: %+v", missing)
	}
	var list leasemcp.ListOutput
	a.mustCall("lease_list", map[string]any{"prefix": name}, &list)
	if len(list.Leases) != 1 || !list.Leases[0].HeldByMe {
		t.Fatalf("list: %+v", list)
	}

	// The holding is a resource.
	rr, err := a.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "lease://held/" + name})
	if err != nil {
		t.Fatal(err)
	}
	var hl leasemcp.HeldLease
	if err := json.Unmarshal([]byte(rr.Contents[0].Text), &hl); err != nil || hl.FencingToken != 1 || hl.Name != name {
		t.Fatalf("resource lease://held/%s: %s (%v)", name, rr.Contents[0].Text, err)
	}

	// release; then the other session gets token 2.
	var rel leasemcp.ReleaseOutput
	a.mustCall("lease_release", map[string]any{"name": name}, &rel)
	if !rel.Released || rel.FencingToken != 1 || len(rel.Held) != 0 {
		t.Fatalf("release: %+v", rel)
	}
	if err := a.call("lease_release", map[string]any{"name": name}, &rel); err == nil {
		t.Fatal("a second release of a lease the session no longer holds succeeded")
	}
	if _, err := a.cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "lease://held/" + name}); err == nil {
		t.Fatal("the resource of a released holding is still there")
	}
	b.mustCall("lease_acquire", map[string]any{"name": name, "ttlSeconds": 5}, &bacq)
	if !bacq.Acquired || bacq.FencingToken != 2 || bacq.Holder != "agent-b" {
		t.Fatalf("second session's acquire after the release: %+v", bacq)
	}

	// Session end (stdin closed) releases.
	b.close()
	l, err := sdk.Get(context.Background(), name)
	if err != nil || l.Held || l.FencingToken != 2 || l.Holder != "agent-b" {
		t.Fatalf("after the session ended: %+v, %v", l, err)
	}
	a.mustCall("lease_acquire", map[string]any{"name": name}, &acq)
	if acq.FencingToken != 3 {
		t.Fatalf("acquire after the other session ended: %+v", acq)
	}
}

// callRaw calls a tool and returns its raw result.
func callRaw(t *testing.T, s *session, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := s.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("%s: %v %s", tool, err, text(res))
	}
	return res
}

// TestSIGTERMReleases: SIGTERM to leasectl mcp releases everything held.
func TestSIGTERMReleases(t *testing.T) {
	svc := startService(t)
	sdk := sdkClient(t, svc)
	a := startSession(t, svc.URL, "agent-term", 30*time.Second)
	names := []string{e2e.UniqueName("mcp.term"), e2e.UniqueName("mcp.term")}
	for _, n := range names {
		var out leasemcp.AcquireOutput
		a.mustCall("lease_acquire", map[string]any{"name": n}, &out)
		if !out.Acquired {
			t.Fatalf("acquire %s: %+v", n, out)
		}
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.cs.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("leasectl mcp did not end within 15s of SIGTERM")
	}
	for _, n := range names {
		l, err := sdk.Get(context.Background(), n)
		if err != nil || l.Held {
			t.Fatalf("%s after SIGTERM: %+v, %v", n, l, err)
		}
	}
}

// TestBackgroundRenewal: a lease stays held past 3 TTLs while the client
// sends nothing.
func TestBackgroundRenewal(t *testing.T) {
	svc := startService(t)
	sdk := sdkClient(t, svc)
	name := e2e.UniqueName("mcp.renew")
	// TTL 2s: short enough to test, long enough for a loaded machine to
	// renew in time (renews every 2/3 s; the safe deadline is at 1.8 s).
	a := startSession(t, svc.URL, "agent-idle", 2*time.Second)
	var acq leasemcp.AcquireOutput
	a.mustCall("lease_acquire", map[string]any{"name": name}, &acq)
	if !acq.Acquired || acq.FencingToken != 1 {
		t.Fatalf("acquire: %+v", acq)
	}
	time.Sleep(6500 * time.Millisecond) // idle for 3.25 TTLs
	l, err := sdk.Get(context.Background(), name)
	if err != nil || !l.Held || l.Holder != "agent-idle" || l.FencingToken != 1 || l.Transitions != 1 {
		t.Fatalf("after 3.25 TTLs idle: %+v, %v", l, err)
	}
	var held leasemcp.HeldOutput
	a.mustCall("lease_held", map[string]any{}, &held)
	if len(held.Leases) != 1 || held.Leases[0].FencingToken != 1 || !held.Leases[0].Renewing || len(held.LostLeases) != 0 {
		t.Fatalf("lease_held after 3.25 TTLs: %+v", held)
	}
}

// TestFrozenServiceReportsLoss: with the service frozen (SIGSTOP), the
// holding is given up at its safe deadline, and the next tool call says so,
// as do a logging notification and a resource update. Acquiring it again
// afterwards gives a new token.
func TestFrozenServiceReportsLoss(t *testing.T) {
	svc := startService(t)
	name := e2e.UniqueName("mcp.frozen")
	a := startSession(t, svc.URL, "agent-frozen", time.Second)
	ctx := context.Background()
	//lint:ignore SA1019 the server still sends logging notifications (see notifyLost)
	if err := a.cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
		t.Fatal(err)
	}
	var acq leasemcp.AcquireOutput
	a.mustCall("lease_acquire", map[string]any{"name": name}, &acq)
	if !acq.Acquired {
		t.Fatalf("acquire: %+v", acq)
	}
	if err := a.cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "lease://held/" + name}); err != nil {
		t.Fatal(err)
	}
	// Let the renewer confirm the holding first.
	waitFor(t, 5*time.Second, func() bool {
		var held leasemcp.HeldOutput
		a.mustCall("lease_held", map[string]any{}, &held)
		return len(held.Leases) == 1 && held.Leases[0].Renewing
	})
	frozeAt := time.Now()
	svc.Freeze(t)
	defer func() { _ = svc.Thaw() }()

	// The logging notification arrives by itself, at the safe deadline at
	// the latest (TTL × 0.9 after the last renew was sent).
	select {
	case m := <-a.logs:
		b, _ := json.Marshal(m.Data)
		if m.Level != "error" || !strings.Contains(string(b), `"lease_lost"`) || !strings.Contains(string(b), name) {
			t.Fatalf("logging notification: %s %s", m.Level, b)
		}
		t.Logf("loss notified %v after the freeze (TTL 1s)", time.Since(frozeAt))
	case <-time.After(10 * time.Second):
		t.Fatal("no logging notification of the loss within 10s of the freeze")
	}
	select {
	case uri := <-a.update:
		if uri != "lease://held/"+name {
			t.Fatalf("resource updated: %s", uri)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no resources/updated notification of the loss")
	}
	// The next tool call (answered without the service) reports it, once.
	var held leasemcp.HeldOutput
	a.mustCall("lease_held", map[string]any{}, &held)
	if len(held.Leases) != 0 || len(held.Held) != 0 || len(held.LostLeases) != 1 ||
		held.LostLeases[0].Name != name || held.LostLeases[0].FencingToken != 1 ||
		!strings.Contains(held.LostLeases[0].Reason, "safe deadline") || !strings.Contains(held.Warning, "LOST") {
		t.Fatalf("lease_held after the freeze: %+v", held)
	}
	var again leasemcp.HeldOutput
	a.mustCall("lease_held", map[string]any{}, &again)
	if len(again.LostLeases) != 0 {
		t.Fatalf("the loss was reported twice: %+v", again)
	}
	if err := a.call("lease_release", map[string]any{"name": name}, &leasemcp.ReleaseOutput{}); err == nil {
		t.Fatal("releasing a lost lease succeeded")
	}

	// Thawed, an acquire gets a new holding: nothing renews the lost one.
	if err := svc.Thaw(); err != nil {
		t.Fatal(err)
	}
	a.mustCall("lease_acquire", map[string]any{"name": name}, &acq)
	if !acq.Acquired || acq.FencingToken != 2 {
		t.Fatalf("acquire after the thaw: %+v", acq)
	}
}

// TestLostHoldingIsNeverRevived: a holding the service ended behind the
// session's back (an operator's revoke: a REST release of a session-held
// holding is session_held, docs/contract.md §3) is reported with its
// reason, and acquiring the lease again gives a new token.
func TestLostHoldingIsNeverRevived(t *testing.T) {
	svc := startService(t)
	sdk := sdkClient(t, svc)
	name := e2e.UniqueName("mcp.stale")
	a := startSession(t, svc.URL, "agent-stale", 2*time.Second)
	var acq leasemcp.AcquireOutput
	a.mustCall("lease_acquire", map[string]any{"name": name}, &acq)
	waitFor(t, 5*time.Second, func() bool { // the renewer has taken the holding over
		var held leasemcp.HeldOutput
		a.mustCall("lease_held", map[string]any{}, &held)
		return len(held.Leases) == 1 && held.Leases[0].Renewing
	})
	// A REST release behind the session's back is refused; an operator's
	// revoke ends the holding.
	if _, err := sdk.Release(context.Background(), name, "agent-stale", acq.FencingToken); !errors.Is(err, client.ErrSessionHeld) {
		t.Fatalf("REST release of the session-held holding: %v; want ErrSessionHeld", err)
	}
	if _, err := sdk.Revoke(context.Background(), name, client.RevokeRequest{Reason: "stuck"}); err != nil {
		t.Fatal(err)
	}
	var held leasemcp.HeldOutput
	waitFor(t, 5*time.Second, func() bool {
		a.mustCall("lease_held", map[string]any{}, &held)
		return len(held.LostLeases) == 1
	})
	if !strings.Contains(held.LostLeases[0].Reason, "revoked") || len(held.Held) != 0 {
		t.Fatalf("lease_held after the loss: %+v", held)
	}
	a.mustCall("lease_acquire", map[string]any{"name": name}, &acq)
	if acq.FencingToken != 2 {
		t.Fatalf("acquire after the loss: %+v", acq)
	}
	l, err := sdk.Renew(context.Background(), name, client.RenewRequest{Holder: "agent-stale", FencingToken: 1})
	if !errors.Is(err, client.ErrLost) {
		t.Fatalf("renew of the lost token: %+v, %v", l, err)
	}
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	if _, ok := e2e.Poll(d, 100*time.Millisecond, cond); !ok {
		t.Fatalf("condition not met within %v", d)
	}
}
