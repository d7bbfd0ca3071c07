package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/backend/postgres"
	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/lease"
)

// TestListenWakesWaitersElsewhere: two Managers over two pools, as two
// instances: a release through the first wakes, through NOTIFY, the
// acquire waiting on the second long before the holding would expire;
// renewals notify nobody. After a restart of PostgreSQL, Listen
// reconnects and wakes again.
func TestListenWakesWaitersElsewhere(t *testing.T) {
	c := pgtest.Start(t)
	var m [2]*lease.Manager
	var stores [2]*postgres.Store
	for i := range m {
		pool, err := pgxpool.New(t.Context(), c.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if stores[i] = postgres.New(pool); i == 0 {
			if err := stores[i].Migrate(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if m[i], err = lease.NewManager(stores[i], lease.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	woken := make(chan string, 16)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = stores[1].Listen(ctx, func(name string) { woken <- name; m[1].Wake(name) }) }()
	handOver := func(name string) {
		t.Helper()
		h, err := m[0].Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "a", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m[0].Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "a", FencingToken: h.FencingToken}); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			_, err := m[1].Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "b", TTL: time.Minute, Wait: 30 * time.Second})
			got <- err
		}()
		for m[1].Waiting() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // the waiter was refused and waits
		if _, err := m[0].Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: h.FencingToken}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("waiting acquire: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter on the other instance was not woken by the release")
		}
		if n := <-woken; n != name {
			t.Fatalf("woken for %q, want %q", n, name)
		}
		time.Sleep(100 * time.Millisecond)
		if len(woken) != 0 {
			t.Fatalf("%d more notifications: only the release ends a holding (not the acquire, not the renewal)", len(woken))
		}
	}
	handOver("first")
	c.Restart()
	deadline := time.Now().Add(20 * time.Second)
	for stores[0].Ping(t.Context()) != nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // Listen reconnects within a second
	handOver("second")
}
