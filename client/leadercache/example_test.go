package leadercache_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/leadercache"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/lease"
)

// Example wires a cache to the service's events topic. It needs Pub/Sub
// (or its emulator), so it is compiled but not run.
func Example() {
	ctx := context.Background()
	svc, err := client.New("http://localhost:8080", client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ps, err := pubsub.NewClient(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = ps.Close() }()
	// A subscription of this process's own, with message ordering, on the
	// topic the service publishes to (LEASESVC_PUBSUB_TOPIC).
	host, _ := os.Hostname()
	sub, deleteSub, err := leadercache.Subscribe(ctx, ps, "leasesvc-events", "leader-cache-"+host)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = deleteSub(context.Background()) }()
	cache, err := leadercache.New(svc, sub, leadercache.Config{}) // TTL 5s
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = cache.Run(ctx) }()

	l, err := cache.Leader(ctx, "team-a.scheduler")
	if err != nil {
		log.Fatal(err)
	}
	if l.Held {
		fmt.Printf("send work to %s, token %d\n", l.Holder, l.FencingToken)
	}
}

// ExampleCache_Leader shows the answers of a cache without a subscription:
// reads, then events applied by hand (as Run applies Pub/Sub messages).
func ExampleCache_Leader() {
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	svc, err := client.New(srv.URL, client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	l, err := svc.Acquire(ctx, "team-a.scheduler", client.AcquireRequest{Holder: "agent-1", TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	cache, err := leadercache.New(svc, nil, leadercache.Config{})
	if err != nil {
		log.Fatal(err)
	}
	leader, err := cache.Leader(ctx, "team-a.scheduler") // read from the service
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(leader.Holder, leader.FencingToken, leader.Held, leader.Source)

	l.Held = false
	cache.Apply(client.Event{Type: client.EventReleased, Lease: l})
	cache.Apply(client.Event{Type: client.EventAcquired, Lease: l}) // late: dropped
	leader, _ = cache.Leader(ctx, "team-a.scheduler")               // from memory
	fmt.Println(leader.Holder, leader.FencingToken, leader.Held, leader.Source)
	// Output:
	// agent-1 1 true read
	// agent-1 1 false released
}

// ExampleCache_Run follows the service alone, with no Pub/Sub: given no
// subscription, Run watches every lease under Config.Prefix through the
// service's prefix stream (it reconnects by itself, resuming where it
// stopped). It needs a running service, so it is compiled but not run.
func ExampleCache_Run() {
	ctx := context.Background()
	svc, err := client.New("http://localhost:8080", client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	cache, err := leadercache.New(svc, nil, leadercache.Config{Prefix: "team-a."})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = cache.Run(ctx) }()

	l, err := cache.Leader(ctx, "team-a.scheduler")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s leads with token %d (from %s)\n", l.Holder, l.FencingToken, l.Source)
}
