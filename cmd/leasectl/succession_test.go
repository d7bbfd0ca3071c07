package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// TestTransferAndCheckpointCommands: renew and release write the
// checkpoint; transfer hands the lease to --to, whose acquire gets the
// next token and the checkpoint while anyone else's exits 3 with the
// reservation printed.
func TestTransferAndCheckpointCommands(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn"})
	name := e2e.UniqueName("xfer")
	if _, errOut, code := ctl(t, svc.URL, "acquire", name, "--holder", "a", "--priority", "4"); code != 0 {
		t.Fatalf("acquire: %d %s", code, errOut)
	}
	out, errOut, code := ctl(t, svc.URL, "renew", name, "--holder", "a", "--fencing-token", "1", "--checkpoint", `{"n":1}`, "--json")
	var l client.Lease
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || string(l.Checkpoint) != `{"n":1}` || l.Priority != 4 {
		t.Fatalf("renew --checkpoint: %d %q %q", code, out, errOut)
	}
	if _, _, code := ctl(t, svc.URL, "renew", name, "--holder", "a", "--fencing-token", "1", "--checkpoint", `[1]`); code != exitUsage {
		t.Fatalf("renew --checkpoint [1]: exit %d, want %d", code, exitUsage)
	}
	if _, _, code := ctl(t, svc.URL, "transfer", name, "--holder", "a", "--fencing-token", "1"); code != exitUsage {
		t.Fatalf("transfer without --to: exit %d, want %d", code, exitUsage)
	}
	if _, _, code := ctl(t, svc.URL, "transfer", name, "--holder", "a", "--fencing-token", "1", "--to", "a"); code != exitUsage {
		t.Fatalf("transfer to itself: exit %d, want %d (the service's invalid_argument)", code, exitUsage)
	}
	out, errOut, code = ctl(t, svc.URL, "transfer", name, "--holder", "a", "--fencing-token", "1", "--to", "b", "--checkpoint", `{"n":2}`, "--reserve", "30s", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || l.Held || l.ReservedFor != "b" || l.ReservedUntil.Sub(l.ServerTime) != 30*time.Second {
		t.Fatalf("transfer: %d %q %q", code, out, errOut)
	}
	out, _, code = ctl(t, svc.URL, "acquire", name, "--holder", "c", "--json")
	if code != exitHeld || json.Unmarshal([]byte(out), &l) != nil || l.ReservedFor != "b" {
		t.Fatalf("acquire by c while reserved for b: exit %d %q, want %d and the lease", code, out, exitHeld)
	}
	out, _, _ = ctl(t, svc.URL, "get", name)
	if !strings.Contains(out, "reserved for b until") {
		t.Fatalf("get of a reserved lease prints no reservation:\n%s", out)
	}
	out, errOut, code = ctl(t, svc.URL, "acquire", name, "--holder", "b", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || l.FencingToken != 2 || string(l.Checkpoint) != `{"n":2}` || l.CheckpointToken != 1 {
		t.Fatalf("acquire by b: %d %q %q", code, out, errOut)
	}
	out, errOut, code = ctl(t, svc.URL, "release", name, "--holder", "b", "--fencing-token", "2", "--checkpoint", `{"n":3}`, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || string(l.Checkpoint) != `{"n":3}` || l.CheckpointToken != 2 {
		t.Fatalf("release --checkpoint: %d %q %q", code, out, errOut)
	}
	if _, _, code := ctl(t, svc.URL, "transfer", name, "--holder", "b", "--fencing-token", "2", "--to", "c"); code != exitLost {
		t.Fatalf("transfer of a released holding: exit %d, want %d", code, exitLost)
	}
}

// TestRunPreemptionHandsOverTheCheckpointFile: a `run --priority 1` leads;
// its CMD records progress in $LEASE_CHECKPOINT_FILE, which reaches the
// service with the renewals. A `run --priority 10 --preempt` joins: the
// first is asked to step down, stops its CMD (whose last word, written on
// SIGTERM, goes with the release) and exits 4; the second's CMD starts with
// the next token and that checkpoint in its file.
func TestRunPreemptionHandsOverTheCheckpointFile(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn", "LEASESVC_MIN_TTL": "200ms"})
	name := e2e.UniqueName("preempt")
	getenv := func(string) string { return "" }
	put := func(obj string) string {
		return `printf '%s' '` + obj + `' > "$LEASE_CHECKPOINT_FILE.tmp" && mv "$LEASE_CHECKPOINT_FILE.tmp" "$LEASE_CHECKPOINT_FILE"`
	}
	// CMD waits in the shell's own wait (which a signal interrupts at
	// once, where a foreground sleep would hold the trap back) and has
	// 250 ms, not the default tenth of the window, to write its last
	// checkpoint: a loaded machine took longer than 100 ms. (--ttl 2s: a
	// grace of 250 ms must fit the ttl as well, client.FitCancelBefore:
	// 2×grace below ttl × 0.9 − ttl/2.)
	lowScript := `trap '` + strings.ReplaceAll(put(`{"n":2}`), `'`, `'\''`) + `; exit 0' TERM
echo "low inherited:[$(cat "$LEASE_CHECKPOINT_FILE")]"
` + put(`{"n":1}`) + `
while :; do sleep 0.2 & wait $!; done`
	var lowOut syncBuffer
	lowDone := make(chan error, 1)
	go func() {
		lowDone <- run(t.Context(), []string{"run", "--lease", name, "--ttl", "2s", "--grace", "250ms", "--holder", "low", "--priority", "1", "--url", svc.URL, "--", "sh", "-c", lowScript},
			getenv, &lowOut, &lowOut)
	}()
	waitOutput(t, &lowOut, "low inherited:[]") // the first leader's checkpoint file is empty
	c := e2e.Client{URL: svc.URL}
	var r e2e.Response
	if _, ok := e2e.Poll(10*time.Second, 50*time.Millisecond, func() bool {
		r = c.Get(t, "/v1/leases/"+name)
		cp, _ := json.Marshal(r.Body["checkpoint"])
		return string(cp) == `{"n":1}`
	}); !ok {
		t.Fatalf("CMD's checkpoint never reached the service: %s", r.Raw)
	}

	highScript := `echo "high inherited:[$(cat "$LEASE_CHECKPOINT_FILE")] by $LEASE_CHECKPOINT_TOKEN token $LEASE_FENCING_TOKEN"`
	var highOut syncBuffer
	highDone := make(chan error, 1)
	go func() {
		highDone <- run(t.Context(), []string{"run", "--lease", name, "--ttl", "1s", "--holder", "high", "--priority", "10", "--preempt", "--url", svc.URL, "--", "sh", "-c", highScript},
			getenv, &highOut, &highOut)
	}()
	for _, done := range []struct {
		name string
		ch   chan error
		out  *syncBuffer
	}{{"low", lowDone, &lowOut}, {"high", highDone, &highOut}} {
		select {
		case err := <-done.ch:
			var ex *exitError
			switch {
			case done.name == "low" && (!errors.As(err, &ex) || ex.code != exitLost || !errors.Is(err, client.ErrYielded)):
				t.Fatalf("low's run = %v, want exit %d after stepping down:\n%s", err, exitLost, done.out.String())
			case done.name == "high" && err != nil:
				t.Fatalf("high's run = %v:\n%s", err, done.out.String())
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%s's run did not end:\n%s", done.name, done.out.String())
		}
	}
	if want := `high inherited:[{"n":2}] by 1 token 2`; !strings.Contains(highOut.String(), want) {
		t.Fatalf("high's CMD printed no %q:\n%s", want, highOut.String())
	}
}

// TestRunRefusesBadPriority: --priority out of range is a usage error.
func TestRunRefusesBadPriority(t *testing.T) {
	_, _, code := ctl(t, "http://127.0.0.1:1", "run", "--lease", "x", "--priority", "1001", "--", "true")
	if code != exitUsage {
		t.Fatalf("run --priority 1001: exit %d, want %d", code, exitUsage)
	}
	if _, _, code := ctl(t, "http://127.0.0.1:1", "acquire", "x", "--holder", "a", "--preempt"); code != exitUsage {
		t.Fatalf("acquire --preempt without --wait: exit %d, want %d", code, exitUsage)
	}
}
