package main

import (
	"strings"
	"testing"
)

// TestConnectionRefusedHint: a service that refuses the connection (or a
// host that does not resolve) is an error with a hint naming where
// leasectl looked and how to point it elsewhere (issue 38 item 8); the exit
// status stays 6.
func TestConnectionRefusedHint(t *testing.T) {
	for _, url := range []string{"http://127.0.0.1:1", "http://leasesvc-nowhere.invalid:1"} {
		_, errOut, code := runCtlAt(t, url, "get", "x")
		if code != exitUnavailable {
			t.Errorf("get at %s: exit %d, want %d", url, code, exitUnavailable)
		}
		for _, want := range []string{"hint:", url, "LEASESVC_URL", "LEASESVC_URL)", "--url"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("get at %s: stderr %q lacks %q", url, errOut, want)
			}
		}
	}
}

// TestRunHintsAtARefusedURL: run, which retries opening its session while
// the service is unreachable, says once where to point it.
func TestRunHintsAtARefusedURL(t *testing.T) {
	out, cancel, done := startRun(t, "http://127.0.0.1:1", "x", "--", "true")
	waitOutput(t, out, "hint: no leasesvc answers at the URL")
	cancel()
	_ = wait(t, done)
	if n := strings.Count(out.String(), "hint:"); n != 1 {
		t.Fatalf("run printed %d hints, want 1:\n%s", n, out.String())
	}
}
