package terraform_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"
)

// readyTimeout returns httpapi.DefaultReadyTimeout, the time /readyz gives
// its backend check before answering 503, from the Go source.
func readyTimeout(t *testing.T) time.Duration {
	t.Helper()
	path := filepath.Join(repoRoot, "httpapi", "handler.go")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sm := regexp.MustCompile(`DefaultReadyTimeout\s*=\s*([0-9]+)\s*\*\s*time\.(Second|Millisecond)`).FindSubmatch(src)
	if sm == nil {
		t.Fatalf("%s: found no `DefaultReadyTimeout = N * time.Second`: the scan is broken", path)
	}
	n, _ := strconv.Atoi(string(sm[1]))
	if string(sm[2]) == "Second" {
		return time.Duration(n) * time.Second
	}
	return time.Duration(n) * time.Millisecond
}

// checkStartupProbeTimeout checks that the startup probe waits longer than
// /readyz's own backend timeout, so that a slow backend gets /readyz's 503
// (and its log line) rather than a probe timeout, and at least a second
// more for the answer to travel; and that the timeout is within the period,
// as Cloud Run requires.
func checkStartupProbeTimeout(t *testing.T, e *evaluator, addr string, probe blockScope) {
	t.Helper()
	num := func(attr string) int {
		v, ok := e.attr(t, probe, attr)
		if !ok || v.Type() != cty.Number {
			t.Fatalf("%s: startup_probe.%s = %#v, want a number", addr, attr, v)
		}
		n, _ := v.AsBigFloat().Int64()
		return int(n)
	}
	timeout, period := time.Duration(num("timeout_seconds"))*time.Second, time.Duration(num("period_seconds"))*time.Second
	if ready := readyTimeout(t); timeout < ready+time.Second {
		t.Errorf("%s: startup_probe.timeout_seconds = %v, want at least a second more than /readyz's backend timeout %v (httpapi.DefaultReadyTimeout)", addr, timeout, ready)
	}
	if timeout > period {
		t.Errorf("%s: startup_probe.timeout_seconds %v exceeds period_seconds %v, which Cloud Run refuses", addr, timeout, period)
	}
}
