package postgres_test

import (
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/postgres"
)

// TestRemoveWakesWaitersOfALiveRow: Remove of a row whose holding is still
// live sends backend.EndedNotification + name at its commit, as a write
// that ends a holding does; the removal of an ended row sends nothing.
func TestRemoveWakesWaitersOfALiveRow(t *testing.T) {
	s := postgres.New(migrated(t))
	got := make(chan string, 64)
	go func() { _ = s.Listen(t.Context(), func(p string) { got <- p }) }()
	listening(t, s, got)

	now, err := s.Get(t.Context(), "ended")
	if err != nil {
		t.Fatal(err)
	}
	at := now.ServerTime.Truncate(time.Millisecond)
	for name, expire := range map[string]time.Time{"ended": at.Add(-time.Second), "live": at.Add(time.Hour)} {
		row := backend.Row{Holder: "h", FencingToken: 1, TTL: time.Second, AcquireTime: at, RenewTime: at, ExpireTime: expire, Transitions: 1}
		if _, err := s.Try(t.Context(), name, func(backend.Snapshot) (*backend.Row, error) { return &row, nil }); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"ended", "live"} { // in this order: the first notification must be the second's
		if removed, err := s.Remove(t.Context(), name, func(backend.Snapshot) bool { return true }); !removed || err != nil {
			t.Fatalf("Remove(%s) = %v, %v; want true, nil", name, removed, err)
		}
	}
	for {
		select {
		case p := <-got:
			if p == "probe" {
				continue // a late answer to listening's probes
			}
			if want := backend.EndedNotification + "live"; p != want {
				t.Fatalf("after removing an ended row and then a live one, the first notification is %q; want %q", p, want)
			}
			return
		case <-time.After(10 * time.Second):
			t.Fatal("the removal of the live row sent no notification within 10 s")
		}
	}
}

// listening returns once s's Listen, feeding got, hears a probe it sends.
func listening(t *testing.T, s *postgres.Store, got <-chan string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if err := s.Notify(t.Context(), "probe"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
			return
		case <-time.After(time.Second):
		}
	}
	t.Fatal("Listen did not hear a probe within 20 s")
}
