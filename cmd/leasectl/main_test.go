package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

func TestMain(m *testing.M) {
	maybeGuard() // leasectl run starts this binary as the guard of CMD
	goleak.VerifyTestMain(m)
}

// ctl runs leasectl with args against url and returns its output and exit
// status.
func ctl(t *testing.T, url string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	getenv := func(k string) string {
		if k == "LEASESVC_URL" {
			return url
		}
		return ""
	}
	err := run(t.Context(), args, getenv, &out, &errOut)
	if err != nil {
		code = exitCode(err)
	}
	return out.String(), errOut.String(), code
}

func TestCommands(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn"})
	name := e2e.UniqueName("ctl")

	out, errOut, code := ctl(t, svc.URL, "acquire", name, "--holder", "agent-a", "--ttl", "30s", "--metadata", `{"addr":"10.0.0.7"}`)
	if code != 0 || !strings.Contains(out, "HOLDER") || !strings.Contains(out, "agent-a") {
		t.Fatalf("acquire: %d %q %q", code, out, errOut)
	}
	t.Logf("acquire prints:\n%s", out)
	out, _, code = ctl(t, svc.URL, "acquire", name, "--holder", "agent-b", "--json")
	var held client.Lease
	if code != exitHeld || json.Unmarshal([]byte(out), &held) != nil || held.Holder != "agent-a" {
		t.Fatalf("acquire while held: %d %q, want exit %d and a's lease as JSON", code, out, exitHeld)
	}
	out, _, code = ctl(t, svc.URL, "renew", "--json", name, "--holder", "agent-a", "--fencing-token", "1", "--ttl", "20s")
	var l client.Lease
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || l.TTL != 20*time.Second || string(l.Metadata) != `{"addr":"10.0.0.7"}` {
		t.Fatalf("renew: %d %q", code, out)
	}
	if _, _, code = ctl(t, svc.URL, "renew", name, "--holder", "agent-a", "--fencing-token", "9"); code != exitLost {
		t.Fatalf("renew with a wrong token: exit %d, want %d", code, exitLost)
	}
	if out, _, code = ctl(t, svc.URL, "get", name, "--json"); code != 0 || json.Unmarshal([]byte(out), &l) != nil || !l.Held {
		t.Fatalf("get: %d %q", code, out)
	}
	if out, _, code = ctl(t, svc.URL, "release", name, "--holder", "agent-a", "--fencing-token", "1"); code != 0 || !strings.Contains(out, "false") {
		t.Fatalf("release: %d %q", code, out)
	}
	out, _, code = ctl(t, svc.URL, "list", "--prefix", name[:strings.IndexByte(name, '.')+1], "--json")
	var page client.Page
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Leases) != 1 || page.Leases[0].Name != name {
		t.Fatalf("list: %d %q", code, out)
	}
	if _, _, code = ctl(t, svc.URL, "get", "never.existed"); code != exitNotFound {
		t.Fatalf("get of a missing lease: exit %d", code)
	}
	if _, _, code = ctl(t, svc.URL, "frobnicate"); code != exitUsage {
		t.Fatalf("unknown command: exit %d", code)
	}
	if _, _, code = ctl(t, svc.URL, "get"); code != exitUsage {
		t.Fatalf("get without a name: exit %d", code)
	}
	if _, _, code = ctl(t, "http://127.0.0.1:1", "get", name); code != exitUnavailable {
		t.Fatalf("no service: exit %d", code)
	}
	// The global flags come before the command's name or after it.
	for _, args := range [][]string{{"--url", svc.URL, "get", name, "--json"}, {"get", name, "--url", svc.URL, "--json"},
		{"--json", "--url=" + svc.URL, "get", name}, {"--url", svc.URL, "--json", "list", "--prefix", name}} {
		if out, errOut, code = ctl(t, "http://127.0.0.1:1", args...); code != 0 || !strings.Contains(out, `"holder":"agent-a"`) {
			t.Fatalf("leasectl %q: exit %d, %q %q", args, code, out, errOut)
		}
	}
}

func TestWatchPrintsChanges(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn"})
	name := e2e.UniqueName("watch")
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"watch", name, "--json", "--missing-ok", "--url", svc.URL}, func(string) string { return "" }, &out, &out)
	}()
	// The lease never existed: the first line says so (the service's data:
	// null), not a zero-valued lease.
	waitOutput(t, &out, `{"type":"lease","lease":null}`)
	c := e2e.Client{URL: svc.URL}
	c.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"a","ttlMs":30000}`)
	c.Post(t, "/v1/leases/"+name+":release", `{"holder":"a","fencingToken":1}`)
	waitOutput(t, &out, `"type":"released"`)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("watch ended with %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("watch printed %q", lines)
	}
}

// TestRunExitsWithCmdStatus: CMD runs with the lease in its environment;
// its status is leasectl's, and the lease is released.
func TestRunExitsWithCmdStatus(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn", "LEASESVC_MIN_TTL": "200ms"})
	name := e2e.UniqueName("run")
	script := `test "$LEASE_NAME" = "` + name + `" && test "$LEASE_HOLDER" = runner && test "$LEASE_FENCING_TOKEN" = 1 && exit 7`
	_, errOut, code := ctl(t, svc.URL, "run", name, "--ttl", "1s", "--holder", "runner", "--", "sh", "-c", script)
	if code != 7 {
		t.Fatalf("run: exit %d, want CMD's 7; stderr:\n%s", code, errOut)
	}
	r := e2e.Client{URL: svc.URL}.Get(t, "/v1/leases/"+name)
	if r.Body["held"] != false || r.Token() != 1 {
		t.Fatalf("after run the lease is %s, want released", r.Raw)
	}
	if _, _, code = ctl(t, svc.URL, "run", "--lease", name, "--ttl", "1s", "--", "true"); code != 0 {
		t.Fatalf("run --lease NAME -- true: exit %d", code)
	}
	if _, _, code = ctl(t, svc.URL, "run", "--ttl", "1s", name, "--", "true"); code != 0 {
		t.Fatalf("run --ttl 1s NAME -- true: exit %d", code)
	}
	if _, _, code = ctl(t, svc.URL, "run", "--lease", name, "--ttl", "1s", "true"); code != 0 {
		t.Fatalf("run --lease NAME true (CMD without --, as before NAME was positional): exit %d", code)
	}
	if _, _, code = ctl(t, svc.URL, "run", "--lease", name, "--ttl", "1s", "--", "/nonexistent/cmd"); code != 127 {
		t.Fatalf("run of a missing CMD: exit %d, want 127", code)
	}
	if _, _, code = ctl(t, svc.URL, "run", "--lease", name); code != exitUsage {
		t.Fatalf("run without CMD: exit %d", code)
	}
	if _, _, code = ctl(t, svc.URL, "run", "--lease", name, "--ttl", "1s", "--grace", "500ms", "--", "true"); code != exitUsage {
		t.Fatalf("run with a grace too long for the ttl: exit %d", code)
	}
}

// TestRunStopsCmdOnInterrupt: cancelling leasectl (SIGINT/SIGTERM in main)
// stops CMD, releases the lease, and passes CMD's status on.
func TestRunStopsCmdOnInterrupt(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn", "LEASESVC_MIN_TTL": "200ms"})
	name := e2e.UniqueName("intr")
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"run", "--lease", name, "--ttl", "2s", "--url", svc.URL, "--", "sh", "-c", "echo started; exec sleep 60"},
			func(string) string { return "" }, &out, &out)
	}()
	waitOutput(t, &out, "started")
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("leasectl run did not stop within 10s")
	}
	var ex *exitError
	if !errors.As(err, &ex) || ex.code != 128+15 {
		t.Fatalf("run = %v, want CMD's status 143 (SIGTERM)", err)
	}
	r := e2e.Client{URL: svc.URL}.Get(t, "/v1/leases/"+name)
	if r.Body["held"] != false {
		t.Fatalf("after an interrupted run the lease is %s, want released", r.Raw)
	}
}

// syncBuffer is a bytes.Buffer for one writer and one reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func waitOutput(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	if _, ok := e2e.Poll(10*time.Second, 10*time.Millisecond, func() bool { return strings.Contains(b.String(), want) }); !ok {
		t.Fatalf("output has no %q:\n%s", want, b.String())
	}
}
