package leasemcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// needTool finds an external tool; missing, it fails the test under
// CI=true and skips it elsewhere, saying what to install.
func needTool(t *testing.T, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := name + " not found: " + install
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// TestTypeScriptClient runs the session of TestSession, TestBackgroundRenewal
// and TestFrozenServiceReportsLoss with the official TypeScript MCP client
// (@modelcontextprotocol/sdk, testdata/tsclient): initialize, tools with
// schemas, acquire → token 1, another session → held, release, session end
// releases, renewal while idle, the frozen service's loss notified and
// reported.
func TestTypeScriptClient(t *testing.T) {
	node := needTool(t, "node", "install Node.js ≥ 18 with npm (apt-get install -y nodejs npm) to run the TypeScript MCP client test")
	npm := needTool(t, "npm", "install npm (apt-get install -y npm) to run the TypeScript MCP client test")
	dir, err := filepath.Abs(filepath.Join("testdata", "tsclient"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ci := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--prefer-offline")
	ci.Dir = dir
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	bin := e2e.Build(t, "./cmd/leasectl")
	svc := startService(t)
	cmd := exec.CommandContext(ctx, node, "client.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LEASECTL="+bin, "LEASESVC_URL="+svc.URL,
		"LEASESVC_PID="+strconv.Itoa(svc.Pid()), "LEASE_PREFIX="+e2e.UniqueName("mcp.ts"))
	stderr := &e2e.SyncBuffer{}
	cmd.Stderr = stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	var steps []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var line struct {
			Step string `json:"step"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("node client.mjs printed %q: %v", sc.Text(), err)
		}
		steps = append(steps, line.Step)
	}
	want := []string{"initialized", "plain input error", "acquire", "acquire_other", "release_then_other", "session_end_releases",
		"renewed_while_idle", "frozen_loss_reported", "done"}
	if strings.Join(steps, " ") != strings.Join(want, " ") {
		t.Fatalf("steps %v, want %v\nstderr:\n%s", steps, want, stderr.String())
	}
}
