package leadercache_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/leadercache"
)

// TestFollowsPrefixStreamWithoutPubSub: a cache with no subscription, run
// against the service over the memory backend, follows the service's
// prefix stream: it is filled by the stream's snapshot, reflects an
// acquire, a release and a takeover without reading the service, keeps to
// its prefix, and drops events older than what it has seen.
func TestFollowsPrefixStreamWithoutPubSub(t *testing.T) {
	svc := service(t)
	ctx := t.Context()
	if _, err := svc.Acquire(ctx, "team-a.before", client.AcquireRequest{Holder: "early", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	cache, err := leadercache.New(svc, nil, leadercache.Config{TTL: time.Hour, Prefix: "team-a."})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := cache.Run(rctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	defer func() { cancel(); wg.Wait() }()

	waitEntry(t, cache, "team-a.before", func(l leadercache.Leader) bool {
		return l.Held && l.Holder == "early" && l.Source == "snapshot"
	})
	const name = "team-a.jobs"
	if _, err := svc.Acquire(ctx, name, client.AcquireRequest{Holder: "agent-a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Acquire(ctx, "team-b.other", client.AcquireRequest{Holder: "x", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitEntry(t, cache, name, func(l leadercache.Leader) bool {
		return l.Held && l.Holder == "agent-a" && l.FencingToken == 1 && l.Source == "acquired"
	})
	if _, err := svc.Release(ctx, name, "agent-a", 1); err != nil {
		t.Fatal(err)
	}
	waitEntry(t, cache, name, func(l leadercache.Leader) bool { return !l.Held && l.FencingToken == 1 && l.Source == "released" })
	if _, err := svc.Acquire(ctx, name, client.AcquireRequest{Holder: "agent-b", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitEntry(t, cache, name, func(l leadercache.Leader) bool { return l.Held && l.Holder == "agent-b" && l.FencingToken == 2 })

	l, err := cache.Leader(ctx, name)
	if err != nil || l.Holder != "agent-b" || !l.Held {
		t.Fatalf("Leader = %+v, %v", l, err)
	}
	if s := cache.Stats(); s.Reads != 0 || s.Events != 3 {
		t.Fatalf("stats %+v: want 3 events and no read (every answer from the stream)", s)
	}
	if _, ok := cache.Peek("team-b.other"); ok {
		t.Fatal("the cache holds a lease outside its prefix")
	}
	if cache.Apply(client.Event{Type: client.EventReleased, Lease: client.Lease{Name: name, Holder: "agent-a", FencingToken: 1}}) {
		t.Fatal("an event older than the cache's entry was applied")
	}
}

// waitEntry polls the cache's memory (never the service) until cond holds.
func waitEntry(t *testing.T, cache *leadercache.Cache, name string, cond func(leadercache.Leader) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, ok := cache.Peek(name)
		if ok && cond(l) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cache does not show what the test waits for on %s within 10s: %+v (ok %v)", name, l, ok)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
