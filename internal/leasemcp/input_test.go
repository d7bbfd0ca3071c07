package leasemcp_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/leasemcp"
)

// offlineSession connects an in-process client to a Server whose lease
// service cannot be reached: enough for what is answered before any call
// to the service (tools/list, input checks).
func offlineSession(t *testing.T) *session {
	t.Helper()
	sdk, err := client.New("http://127.0.0.1:1", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := leasemcp.New(sdk, leasemcp.Config{Holder: "offline"})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "offline-test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &session{t: t, holder: "offline", cs: cs, stderr: &e2e.SyncBuffer{}}
}

// TestToolAnnotations: every tool carries the MCP spec's hints, as the
// client sees them in tools/list: the read-only tools say so, and the
// others say whether a repeat changes anything and whether anything is
// lost (destructiveHint defaults to true in the spec, so it is always
// given).
func TestToolAnnotations(t *testing.T) {
	s := offlineSession(t)
	res, err := s.cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	type hints struct{ ReadOnly, Idempotent, Destructive, OpenWorld bool }
	got := map[string]hints{}
	for _, tool := range res.Tools {
		a := tool.Annotations
		if a == nil || a.DestructiveHint == nil || a.OpenWorldHint == nil {
			t.Fatalf("%s: annotations %+v lack a hint", tool.Name, a)
		}
		got[tool.Name] = hints{a.ReadOnlyHint, a.IdempotentHint, *a.DestructiveHint, *a.OpenWorldHint}
	}
	want := map[string]hints{
		"lease_get":        {ReadOnly: true, Idempotent: true},
		"lease_list":       {ReadOnly: true, Idempotent: true},
		"lease_held":       {ReadOnly: true, Idempotent: true},
		"lease_acquire":    {Idempotent: true},                    // holding it again returns the same token
		"lease_claim_next": {},                                    // each call claims another task
		"lease_release":    {Idempotent: true, Destructive: true}, // the token ends for good
		"lease_checkpoint": {Idempotent: true, Destructive: true}, // replaces the previous checkpoint
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("annotations (-want +got):\n%s", d)
	}
}

// TestInputErrorsInPlainWords: arguments the input schema refuses are
// answered with a tool error that names the argument and what it accepts,
// not with the schema checker's text, and nothing is called.
func TestInputErrorsInPlainWords(t *testing.T) {
	s := offlineSession(t)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"lease_acquire", map[string]any{"name": "a", "ttlSeconds": 0}, `ttlSeconds must be a number between 1 and 3600; you gave 0`},
		{"lease_acquire", map[string]any{"name": "a", "ttlSeconds": 7200}, `ttlSeconds must be a number between 1 and 3600; you gave 7200`},
		{"lease_acquire", map[string]any{"name": "a", "ttlSeconds": "ten"}, `ttlSeconds must be a number between 1 and 3600; you gave "ten"`},
		{"lease_acquire", map[string]any{"name": "a", "waitSeconds": 61}, `waitSeconds must be a number between 0 and 60; you gave 61`},
		{"lease_acquire", map[string]any{"name": "a", "priority": 1.5}, `priority must be a whole number between 0 and 1000; you gave 1.5`},
		{"lease_acquire", map[string]any{"name": "a", "priority": 1001}, `priority must be a whole number between 0 and 1000; you gave 1001`},
		{"lease_acquire", map[string]any{"name": "a", "preempt": "yes"}, `preempt must be true or false; you gave "yes"`},
		{"lease_acquire", map[string]any{"name": "a", "metadata": []int{1}}, `metadata must be a JSON object; you gave [1]`},
		{"lease_acquire", map[string]any{"name": "-a"}, `name must be a string of 1–128 characters of letters, digits, '.', '_' and '-', starting with a letter or digit; you gave "-a"`},
		{"lease_acquire", map[string]any{}, `name is required: give a string of 1–128 characters`},
		{"lease_acquire", map[string]any{"name": "a", "ttl": 5}, `unknown argument "ttl": lease_acquire takes metadata, name, preempt, priority, ttlSeconds, waitSeconds`},
		{"lease_claim_next", map[string]any{"prefix": "t.", "names": []string{"t.a", "t b"}}, `names[1] must be a string of 1–128 characters`},
		{"lease_claim_next", map[string]any{"prefix": "t.", "names": make([]string, 1001)}, `names must list at most 1000 items; you gave 1001`},
		{"lease_claim_next", map[string]any{"prefix": "t.", "ttlSeconds": 0.5}, `ttlSeconds must be a number between 1 and 3600; you gave 0.5`},
		{"lease_list", map[string]any{"pageSize": 5000}, `pageSize must be a whole number between 0 and 1000; you gave 5000`},
		{"lease_checkpoint", map[string]any{"name": "a", "checkpoint": "step 3"}, `checkpoint must be a JSON object; you gave "step 3"`},
		{"lease_held", map[string]any{"verbose": true}, `unknown argument "verbose": lease_held takes no arguments`},
	} {
		err := s.call(tc.tool, tc.args, new(map[string]any))
		if err == nil {
			t.Errorf("%s %v: no error", tc.tool, tc.args)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "validating") {
			t.Errorf("%s %v:\n got %s\nwant %s", tc.tool, tc.args, msg, tc.want)
		}
	}
}
