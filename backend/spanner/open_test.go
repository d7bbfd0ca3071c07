package spanner

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
)

func TestCheckDatabaseName(t *testing.T) {
	for name, want := range map[string]string{
		"projects/leasesvc-test/instances/inst/databases/leases": "",
		"projects/example.com:proj-1/instances/i1/databases/d_1": "",
		"":                                       "required",
		"projects/p/databases/d":                 "4 parts",
		"projects/abc/instances/i1/databases/d1": `project ID "abc" is too short`,
		"projects/leasesvc-test/instances/i/databases/leases":                        `instance ID "i" is too short`,
		"projects/leasesvc-test/instances/inst/databases/l":                          `database ID "l" is too short`,
		"projects/leasesvc-test/instances/Inst/databases/leases":                     `instance ID "Inst": characters`,
		"projects/leasesvc-test/instances/inst/databases/" + strings.Repeat("d", 31): "database ID",
	} {
		err := CheckDatabaseName(name)
		switch {
		case want == "" && err != nil:
			t.Errorf("CheckDatabaseName(%q) = %v, want nil", name, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("CheckDatabaseName(%q) = %v, want an error containing %q", name, err, want)
		}
	}
}

// TestOpenNamesAnUnreachableEndpoint: an emulator host where nobody answers
// stops start-up within seconds, naming the endpoint, not after the
// schema check's minute.
func TestOpenNamesAnUnreachableEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := ln.Addr().String()
	ln.Close()                              // nobody listens there now
	t.Setenv("SPANNER_EMULATOR_HOST", host) // the client reads it from the process
	env := map[string]string{
		"SPANNER_EMULATOR_HOST":     host,
		"LEASESVC_SPANNER_DATABASE": "projects/leasesvc-test/instances/inst/databases/leases",
	}
	o, ok := backend.Lookup("spanner")
	if !ok {
		t.Fatal("spanner is not registered")
	}
	start := time.Now()
	_, err = o.Open(t.Context(), func(k string) string { return env[k] }, backend.OpenOptions{})
	if err == nil || !strings.Contains(err.Error(), host) || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("Open = %v, want an error naming %s", err, host)
	}
	if d := time.Since(start); d > 3*reachTimeout {
		t.Fatalf("Open took %v to fail, want about %v", d, reachTimeout)
	}
	t.Log(err)
}

func TestEnvMaxCommitDelay(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "0": 0, "0s": 0, "100ms": 100 * time.Millisecond, "500ms": MaxCommitDelayLimit, "1.5ms": 1500 * time.Microsecond} {
		got, err := envMaxCommitDelay(func(string) string { return v })
		if err != nil || got != want {
			t.Errorf("LEASESVC_SPANNER_MAX_COMMIT_DELAY=%q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"501ms", "1s", "-1ms", "100", "fast"} {
		if _, err := envMaxCommitDelay(func(string) string { return v }); err == nil || !strings.Contains(err.Error(), "LEASESVC_SPANNER_MAX_COMMIT_DELAY") {
			t.Errorf("LEASESVC_SPANNER_MAX_COMMIT_DELAY=%q: %v, want an error naming the variable", v, err)
		}
	}
}

func TestEnvBatchMax(t *testing.T) {
	for v, want := range map[string]int{"": DefaultBatchMax, "1": 1, "100": 100, "1000": BatchMaxLimit} {
		got, err := envBatchMax(func(string) string { return v })
		if err != nil || got != want {
			t.Errorf("LEASESVC_SPANNER_BATCH_MAX=%q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"0", "-1", "1001", "ten", "1.5"} {
		if _, err := envBatchMax(func(string) string { return v }); err == nil || !strings.Contains(err.Error(), "LEASESVC_SPANNER_BATCH_MAX") {
			t.Errorf("LEASESVC_SPANNER_BATCH_MAX=%q: %v, want an error naming the variable", v, err)
		}
	}
}

// TestLoopOptions: the loop settings the opener returns beside the Store
// (backend.Opened.Loop), applied over what the Store declares, are what
// the service's Loop used when the Store carried them (WithLoop): the
// read-first mode asked for, one at a time on the emulator, the Store's
// batch limit, one Batcher for the Loops to share, and each retry counted by Retries and reported to the hook.
func TestLoopOptions(t *testing.T) {
	s := &Store{cfg: config{batchMax: 7}}
	var reasons []string
	h := s.Hints()
	for _, o := range loopOptions(s, FastPathNever, true, func(r string) { reasons = append(reasons, r) }) {
		o(&h)
	}
	if h.ReadFirst != FastPathNever || !h.OneAtATime || h.MaxBatch != 7 || h.MaxAttempts != 0 || h.Batcher == nil {
		t.Fatalf("hints = %+v; want read-first never, one at a time, MaxBatch 7, the default MaxAttempts, a Batcher for the service's Loops to share", h)
	}
	h.OnRetry("aborted")
	if s.Retries() != 1 || len(reasons) != 1 || reasons[0] != "aborted" {
		t.Fatalf("after one retry: Retries() = %d, the hook saw %q; want 1 and [aborted]", s.Retries(), reasons)
	}
	h = s.Hints()
	for _, o := range loopOptions(s, FastPathAdaptive, false, nil) {
		o(&h)
	}
	h.OnRetry("aborted")
	if h.ReadFirst != FastPathAdaptive || h.OneAtATime || s.Retries() != 2 {
		t.Fatalf("hints = %+v, Retries() = %d; want adaptive, not one at a time, 2 retries (no hook)", h, s.Retries())
	}
}
