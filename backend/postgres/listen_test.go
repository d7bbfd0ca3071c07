package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/postgres"
	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/lease"
)

// TestNotifyReachesEveryListener: two stores over two pools, as two
// instances: what one Notifies, the other's Listen gets (a payload of
// backend.MaxNotification bytes too), and the sender's own Listen as well.
// After a restart of PostgreSQL, Listen reconnects and gets them again.
func TestNotifyReachesEveryListener(t *testing.T) {
	c := pgtest.Start(t)
	var stores [2]*postgres.Store
	for i := range stores {
		pool, err := pgxpool.New(t.Context(), c.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		stores[i] = postgres.New(pool)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var got [2]chan string
	for i, s := range stores {
		got[i] = make(chan string, 16)
		go func() { _ = s.Listen(ctx, func(p string) { got[i] <- p }) }()
	}
	big := strings.Repeat("x", backend.MaxNotification)
	round := func(label string) {
		t.Helper()
		for _, p := range []string{label, big} {
			if err := stores[0].Notify(t.Context(), p); err != nil {
				t.Fatalf("%s: Notify(%d bytes): %v", label, len(p), err)
			}
			for i := range got {
				select {
				case g := <-got[i]:
					if g != p {
						t.Fatalf("%s: listener %d got %.20q (%d bytes), want %.20q (%d bytes)", label, i, g, len(g), p, len(p))
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: listener %d got nothing in 10 s", label, i)
				}
			}
		}
	}
	waitListening := func() {
		defer func() {
			time.Sleep(200 * time.Millisecond)
			for i := range got {
				for len(got[i]) > 0 {
					<-got[i] // late probes
				}
			}
		}()
		deadline := time.Now().Add(20 * time.Second)
		for {
			if err := stores[0].Notify(t.Context(), "probe"); err == nil {
				select {
				case <-got[0]:
					select {
					case <-got[1]:
						return
					case <-time.After(time.Second):
					}
				case <-time.After(time.Second):
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("the listeners did not hear a probe within 20 s")
			}
		}
	}
	waitListening()
	round("first")

	// A write that ends a holding (the release; not the acquire, not the
	// renewal) sends backend.EndedNotification + name at its commit.
	if err := stores[0].Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	m, err := lease.NewManager(stores[0], lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: "w", Holder: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Renew(t.Context(), lease.RenewRequest{Name: "w", Holder: "a", FencingToken: h.FencingToken}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: "w", Holder: "a", FencingToken: h.FencingToken}); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-got[1]:
		if g != backend.EndedNotification+"w" {
			t.Fatalf("after acquire, renew and release: got %q first, want %q", g, backend.EndedNotification+"w")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the release sent no notification")
	}
	time.Sleep(100 * time.Millisecond)
	if len(got[1]) != 0 {
		t.Fatalf("%d more notifications: only the release ends a holding", len(got[1]))
	}
	c.Restart()
	waitListening() // Listen reconnects within a second of the database's return
	round("second")
}
