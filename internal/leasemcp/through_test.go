package leasemcp_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/internal/leasemcp"
	"github.com/leasesvc/leasesvc/lease"
	sessions "github.com/leasesvc/leasesvc/session"
)

// TestThroughASession: with Config.Session the server holds the agent's
// leases through the session (a plain renew of one is refused as
// session-held), says so in its instructions, checkpoints over it, and
// releases everything when the MCP session ends.
func TestThroughASession(t *testing.T) {
	events := hub.New()
	m, err := lease.NewManager(memory.New(), lease.Config{OnChange: events.Publish})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := sessions.New(sessions.Manager{M: m}, sessions.Config{Events: events, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(slog.DiscardHandler), Events: events, Sessions: reg})
	if err != nil {
		t.Fatal(err)
	}
	svc := httptest.NewServer(h)
	defer func() { h.CloseStreams(); svc.CloseClientConnections(); svc.Close(); reg.Stop() }()

	sdk, err := client.New(svc.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := sdk.OpenSession(t.Context(), client.SessionConfig{Window: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sess.Close(context.Background()) }()
	k, err := client.NewKeeper(t.Context(), sdk, client.KeeperConfig{Session: sess})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := leasemcp.New(sdk, leasemcp.Config{Holder: "through", TTL: 3 * time.Second, Keeper: k})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "through-test", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	if in := cs.InitializeResult().Instructions; !strings.Contains(in, "through a session (window 200ms)") {
		t.Fatalf("the instructions do not say the leases are held through a session: %s", in)
	}
	s := &session{t: t, holder: "through", cs: cs, stderr: &e2e.SyncBuffer{}}
	var acq leasemcp.AcquireOutput
	s.mustCall("lease_acquire", map[string]any{"name": "mcp.through", "ttlSeconds": 20}, &acq)
	if !acq.Acquired {
		t.Fatalf("acquire: %+v", acq)
	}
	// ttlSeconds does not apply through a session: the result says so and
	// gives the window instead (issue 38 item 2).
	if acq.WindowSeconds != 0.2 || !strings.Contains(acq.Instructions, "ttlSeconds does not apply") {
		t.Fatalf("acquire with ttlSeconds through a session: windowSeconds %v, instructions %q", acq.WindowSeconds, acq.Instructions)
	}
	var held leasemcp.HeldOutput
	s.mustCall("lease_held", map[string]any{}, &held)
	if len(held.Leases) != 1 || held.Leases[0].WindowSeconds != 0.2 || held.Leases[0].TTLSeconds != 0 {
		t.Fatalf("lease_held through a session: %+v, want windowSeconds 0.2 and no ttlSeconds", held.Leases)
	}
	if _, err := sdk.Renew(t.Context(), "mcp.through", client.RenewRequest{Holder: "through", FencingToken: acq.FencingToken}); err == nil || !strings.Contains(err.Error(), "session_held") {
		t.Fatalf("a plain renew of the holding answered %v, want 409 session_held", err)
	}
	var cp leasemcp.CheckpointOutput
	s.mustCall("lease_checkpoint", map[string]any{"name": "mcp.through", "checkpoint": map[string]any{"step": 2}}, &cp)
	if l, err := sdk.Get(t.Context(), "mcp.through"); err != nil || !l.Held || string(l.Checkpoint) != `{"step":2}` {
		t.Fatalf("after the checkpoint: %+v, %v", l, err)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if l, err := sdk.Get(context.Background(), "mcp.through"); err != nil || l.Held {
		t.Fatalf("after the MCP session ended: %+v, %v", l, err)
	}
	if _, err := sess.Acquire(context.Background(), "mcp.other", client.AcquireRequest{Holder: "through"}); err != nil && !errors.Is(err, client.ErrHeld) {
		t.Fatalf("the session is still usable after the server ended: %v", err)
	}
}
