package client_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/internal/fakeclock"
)

// TestElectorSaysItsModeOnce: an Elector without a Logger says on stderr,
// in one line, how it holds its lease: through a session (window 1s), or
// with plain renewals and why. It says so once per process for each change
// of mode, not for every Run or term; an Elector with a Logger says it
// there instead, and nothing on stderr. Only an Elector that builds its
// Keeper (Client.NewElector) says it: a Keeper given to NewElector was
// built, and its mode said, by its owner.
func TestElectorSaysItsModeOnce(t *testing.T) {
	var out syncBuffer
	defer client.SwapModeOut(&out)()
	clock := fakeclock.New(epoch)
	lines := func() []string { return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") }

	f := newFakeSessions(t)
	c, err := client.New(f.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var rec term
	e, err := c.NewElector("svc.mode", rec.config(clock, "agent-a"))
	if err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= 2; run++ { // a second Run in the same mode says nothing new
		stop := runElector(t, e)
		waitFor(t, "leading", func() bool { n, _, _ := rec.get(); return n == run })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{`leasesvc: elector "svc.mode" holds through a session (window 1s)`}
	if got := lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after two Runs through a session, stderr says %q, want %q", got, want)
	}

	svc := newService(t, clock) // no sessions: 404 at the upgrade
	var plain term
	pe, err := svc.client(t, client.Config{MaxAttempts: 1}).NewElector("svc.plain", plain.config(clock, "agent-a"))
	if err != nil {
		t.Fatal(err)
	}
	stop := runElector(t, pe)
	waitFor(t, "leading with plain renewals", func() bool { n, _, _ := plain.get(); return n == 1 })
	_ = stop()
	want = append(want, `leasesvc: elector "svc.plain" holds with plain renewals (ttl 30s): the service offers no sessions`)
	if got := lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after a fall back to plain renewals, stderr says %q, want %q", got, want)
	}

	var chosen term
	ce, err := keeperElector(t, svc.client(t, client.Config{MaxAttempts: 1}), "svc.chosen",
		client.KeeperConfig{PlainRenewals: true, TTL: 20 * time.Second, Clock: clock}, chosen.config(clock, "agent-b"))
	if err != nil {
		t.Fatal(err)
	}
	stop = runElector(t, ce)
	waitFor(t, "leading over a Keeper given", func() bool { n, _, _ := chosen.get(); return n == 1 })
	_ = stop()
	if got := lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("over a Keeper given, stderr says %q, want %q", got, want)
	}

	var logged term
	logs := &syncBuffer{}
	lcfg := logged.config(clock, "agent-c")
	lcfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	le, err := c.NewElector("svc.logged", lcfg)
	if err != nil {
		t.Fatal(err)
	}
	stop = runElector(t, le)
	waitFor(t, "leading with a Logger", func() bool { n, _, _ := logged.get(); return n == 1 })
	_ = stop()
	if got := lines(); len(got) != len(want) {
		t.Fatalf("an Elector with a Logger wrote on stderr: %q", got[len(want):])
	}
	if !strings.Contains(logs.String(), "holding through a session (window 1s)") || !strings.Contains(logs.String(), "lease=svc.logged") {
		t.Fatalf("the Elector's Logger does not say how it holds:\n%s", logs)
	}
}
