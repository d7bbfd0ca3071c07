package client_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/session"
)

// TestSessionLimitFallsBackToPlainRenewals: when the service refuses to
// open the shared session at its session limit (429 resource_exhausted
// answered to open, docs/contract.md §14), an Elector holds with plain
// renewals and says why, instead of retrying the open forever and never
// leading; a session given to an Elector is unaffected, and the refusal
// is not remembered: the next Run asks for a session again and holds
// through it once the service has room.
func TestSessionLimitFallsBackToPlainRenewals(t *testing.T) {
	srv, _ := newTestService(t, testService{sessions: &session.Config{MaxSessions: 1}})
	c, err := client.New(srv.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	given, err := c.OpenSession(t.Context(), client.SessionConfig{}) // the instance's only session
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	run := func(name string, s *client.Session) func() error {
		_, stop := leadWith(t, c, name, client.KeeperConfig{Session: s}, client.ElectorConfig{Holder: "agent-a", Logger: logger}, logs)
		return stop
	}
	held := func(name string, viaSession bool) {
		t.Helper()
		if l, err := c.Get(t.Context(), name); err != nil || !l.Held || l.Session != viaSession {
			t.Fatalf("%s: %+v, %v; want held, session %v; log:\n%s", name, l, err, viaSession, logs)
		}
	}

	stopPlain := run("svc.limited", nil)
	held("svc.limited", false)
	if !strings.Contains(logs.String(), "with plain renewals (ttl 30s): the service's session limit is reached") {
		t.Fatalf("the fallback is not logged:\n%s", logs)
	}
	stopGiven := run("svc.given", given)
	held("svc.given", true)
	for _, stop := range []func() error{stopPlain, stopGiven} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	if err := given.Close(t.Context()); err != nil {
		t.Fatal(err)
	}

	stop := run("svc.limited", nil) // room again: asked again, not remembered
	held("svc.limited", true)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
