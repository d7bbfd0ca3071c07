package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/internal/fakeclock"
)

// TestElectorReportsSafeDeadlines: OnSafeDeadline hears the safe deadline
// of the acquire before the term starts, and the new one after every
// successful renew: the time the request was sent plus TTL × (1 −
// DriftMargin).
func TestElectorReportsSafeDeadlines(t *testing.T) {
	clock := fakeclock.New(epoch)
	s := newService(t, clock)
	c := s.client(t, client.Config{MaxAttempts: 1})
	var rec term
	var mu sync.Mutex
	var deadlines []time.Time
	startedSeen := -1 // deadlines reported when OnStartedLeading ran
	cfg := rec.config(clock, "agent-a")
	started := cfg.Callbacks.OnStartedLeading
	cfg.Callbacks.OnStartedLeading = func(ctx context.Context) {
		mu.Lock()
		startedSeen = len(deadlines)
		mu.Unlock()
		started(ctx)
	}
	cfg.Callbacks.OnSafeDeadline = func(d time.Time) {
		mu.Lock()
		deadlines = append(deadlines, d)
		mu.Unlock()
	}
	e, err := keeperElector(t, c, "svc.deadline", client.KeeperConfig{Clock: clock}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, e)
	waitFor(t, "leading", func() bool { n, _, _ := rec.get(); return n == 1 })
	for range 3 {
		before := s.renews.Load()
		clock.Advance(10 * time.Second)
		waitFor(t, "a renew", func() bool { return s.renews.Load() > before })
		waitFor(t, "renew timer re-armed", func() bool { return clock.Timers() == 2 })
	}
	mu.Lock()
	defer mu.Unlock()
	if startedSeen != 1 {
		t.Fatalf("OnStartedLeading saw %d deadlines reported, want the acquire's", startedSeen)
	}
	// The default TTL is 30s and the drift margin 10%: 27s after sending.
	want := []time.Time{epoch.Add(27 * time.Second), epoch.Add(37 * time.Second), epoch.Add(47 * time.Second), epoch.Add(57 * time.Second)}
	if len(deadlines) != len(want) {
		t.Fatalf("deadlines %v, want %v", deadlines, want)
	}
	for i := range want {
		if !deadlines[i].Equal(want[i]) {
			t.Fatalf("deadline %d = %v, want %v (all: %v)", i, deadlines[i], want[i], deadlines)
		}
	}
}
