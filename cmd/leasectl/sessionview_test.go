package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/rawsession"
)

// TestSessionHeldLeasesShowAsSuch (issue 38 item 4): get and list show a
// lease held through a session as session-held with its window, not as a
// lease of the record's 30 s TTL, and watch shows the end of a crashed
// agent's holding as session_expired, not as a plain release.
func TestSessionHeldLeasesShowAsSuch(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn"})
	a := &rawsession.Agent{URLs: []string{svc.URL}, Window: 500 * time.Millisecond}
	if _, err := a.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(context.WithoutCancel(t.Context())) }()
	name := e2e.UniqueName("sessview")
	if _, err := a.Acquire(t.Context(), name, "agent-s", 0); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"get", name}, {"list", "--prefix", name}} {
		out, errOut, code := ctl(t, svc.URL, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		for _, want := range []string{"while alive", "session 500ms", name + ": held through a session (window 500ms)"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v prints no %q:\n%s", args, want, out)
			}
		}
		if strings.Contains(out, "30s") {
			t.Errorf("%v shows the record's 30s TTL:\n%s", args, out)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"watch", name, "--url", svc.URL}, func(string) string { return "" }, &out, &out)
	}()
	waitOutput(t, &out, "agent-s")
	a.Kill() // the agent's socket goes silent: the service ends the session within its window
	waitOutput(t, &out, "session_expired")
	cancel()
	<-done
	if strings.Contains(out.String(), "released ") {
		t.Errorf("watch shows the session's death as a release:\n%s", out.String())
	}
	t.Logf("watch:\n%s", out.String())
}
