package emulatortests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/leadercache"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// startCache subscribes a leader cache to topic (a subscription of its own,
// with ordering) and runs it until the test ends. Its TTL is long, so that
// what it shows can only come from events.
func startCache(t *testing.T, ps *pubsub.Client, topic string, c *client.Client) *leadercache.Cache {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	var sub *pubsub.Subscriber
	var del func(context.Context) error
	eventually(t, 20*time.Second, func() error {
		var err error
		sub, del, err = leadercache.Subscribe(t.Context(), ps, topic, "cache-"+hex.EncodeToString(b[:]))
		if err != nil && strings.Contains(err.Error(), "AlreadyExists") {
			return nil
		}
		return err
	})
	if sub == nil {
		t.Fatal("no subscription")
	}
	cache, err := leadercache.New(c, sub, leadercache.Config{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() { _ = cache.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = del(context.Background())
	})
	return cache
}

// TestLeaderCacheFollowsEvents: the leader cache, fed by the service's
// events on the Pub/Sub emulator, reflects an acquire, a release and a
// takeover within one event delivery, without reading the service, and
// drops events older than what it has seen.
func TestLeaderCacheFollowsEvents(t *testing.T) {
	t.Parallel()
	topic, ps := eventsTopic(t)
	svc := startListening(t, eventsEnv(t, uniqueCollection("cache"), topic))
	c, err := client.New(svc.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cache := startCache(t, ps, topic, c)
	ctx := t.Context()
	name := e2e.UniqueName("cache")

	// The subscription exists before this first change, so every event
	// reaches the cache.
	if _, err := c.Acquire(ctx, name, client.AcquireRequest{Holder: "agent-a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitEntry(t, cache, name, "acquired by agent-a", func(l leadercache.Leader) bool {
		return l.Held && l.Holder == "agent-a" && l.FencingToken == 1 && l.Source == "acquired"
	})

	released := time.Now()
	if _, err := c.Release(ctx, name, "agent-a", 1); err != nil {
		t.Fatal(err)
	}
	lagRelease := waitEntry(t, cache, name, "released", func(l leadercache.Leader) bool {
		return !l.Held && l.FencingToken == 1 && l.Source == "released"
	}).Sub(released)

	acquired := time.Now()
	if _, err := c.Acquire(ctx, name, client.AcquireRequest{Holder: "agent-b", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	lagAcquire := waitEntry(t, cache, name, "acquired by agent-b", func(l leadercache.Leader) bool {
		return l.Held && l.Holder == "agent-b" && l.FencingToken == 2
	}).Sub(acquired)

	l, err := cache.Leader(ctx, name)
	if err != nil || l.Holder != "agent-b" || !l.Held {
		t.Fatalf("Leader = %+v, %v", l, err)
	}
	if s := cache.Stats(); s.Reads != 0 {
		t.Fatalf("the cache read the service %d times; every answer should have come from events", s.Reads)
	}
	// A late event of the older holding changes nothing.
	if cache.Apply(client.Event{Type: client.EventReleased, Lease: client.Lease{Name: name, Holder: "agent-a", FencingToken: 1}}) {
		t.Fatal("an event older than the cache's entry was applied")
	}
	if l, _ := cache.Peek(name); l.Holder != "agent-b" || !l.Held {
		t.Fatalf("after a late event: %+v", l)
	}
	t.Logf("cache updated %v after the release and %v after the takeover (one event delivery each); stats %+v",
		lagRelease.Round(time.Millisecond), lagAcquire.Round(time.Millisecond), cache.Stats())
	if lagRelease > 2*time.Second || lagAcquire > 2*time.Second {
		t.Fatalf("the cache lagged %v / %v: more than an event delivery", lagRelease, lagAcquire)
	}
}

// waitEntry polls the cache's memory (never the service) until cond holds
// for name, and returns when it first did.
func waitEntry(t *testing.T, cache *leadercache.Cache, name, what string, cond func(leadercache.Leader) bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		l, ok := cache.Peek(name)
		if ok && cond(l) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cache does not show %s within 15s: %+v (ok %v)", what, l, ok)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestLeaderCacheFollowsPrefixStream: the same as TestLeaderCacheFollowsEvents
// with no subscription of the cache's own: the cache follows the prefix
// stream of instance B while the changes are made on instance A (they reach
// B through the service's Pub/Sub events), without reading the service.
func TestLeaderCacheFollowsPrefixStream(t *testing.T) {
	t.Parallel()
	topic, _ := eventsTopic(t)
	env := eventsEnv(t, uniqueCollection("cachews"), topic)
	a := startListening(t, env)
	b := startListening(t, env)
	ca, err := client.New(a.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := client.New(b.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	name := e2e.UniqueName("cache")
	cache, err := leadercache.New(cb, nil, leadercache.Config{TTL: time.Minute, Prefix: strings.TrimSuffix(name, "cache")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() { _ = cache.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	// Once the cache knows of this first lease (from the stream's snapshot
	// or its event), the stream is open and every later change reaches it.
	pre := strings.TrimSuffix(name, "cache") + "pre"
	if _, err := ca.Acquire(t.Context(), pre, client.AcquireRequest{Holder: "early", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitEntry(t, cache, pre, "the stream's first news of "+pre, func(l leadercache.Leader) bool { return l.Holder == "early" })

	if _, err := ca.Acquire(t.Context(), name, client.AcquireRequest{Holder: "agent-a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitEntry(t, cache, name, "acquired by agent-a", func(l leadercache.Leader) bool {
		return l.Held && l.Holder == "agent-a" && l.FencingToken == 1 && l.Source == "acquired"
	})
	if _, err := ca.Release(t.Context(), name, "agent-a", 1); err != nil {
		t.Fatal(err)
	}
	waitEntry(t, cache, name, "released", func(l leadercache.Leader) bool { return !l.Held && l.Source == "released" })
	if _, err := ca.Acquire(t.Context(), name, client.AcquireRequest{Holder: "agent-b", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitEntry(t, cache, name, "acquired by agent-b", func(l leadercache.Leader) bool {
		return l.Held && l.Holder == "agent-b" && l.FencingToken == 2
	})
	if s := cache.Stats(); s.Reads != 0 {
		t.Fatalf("the cache read the service %d times; every answer should have come from the stream", s.Reads)
	}
}
