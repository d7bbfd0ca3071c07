package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
)

// exampleService runs the lease API in-process for the examples; a real
// program uses its leasesvc's URL, such as http://localhost:8080.
func exampleService() (url string, stop func()) {
	events := hub.New()
	m, err := lease.NewManager(memory.New(), lease.Config{OnChange: events.Publish})
	if err != nil {
		log.Fatal(err)
	}
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(slog.DiscardHandler), Events: events})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	return srv.URL, func() { h.CloseStreams(); srv.Close() }
}

func ExampleClient() {
	url, stop := exampleService()
	defer stop()
	c, err := client.New(url, client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	l, err := c.Acquire(ctx, "team-a.scheduler", client.AcquireRequest{Holder: "agent-1", TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("agent-1 holds it with token", l.FencingToken)

	_, err = c.Acquire(ctx, "team-a.scheduler", client.AcquireRequest{Holder: "agent-2", TTL: 30 * time.Second})
	var held *client.HeldError
	if errors.As(err, &held) {
		fmt.Println("agent-2 is refused: held by", held.Lease.Holder)
	}

	if _, err := c.Renew(ctx, "team-a.scheduler", client.RenewRequest{Holder: "agent-1", FencingToken: l.FencingToken}); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Release(ctx, "team-a.scheduler", "agent-1", l.FencingToken); err != nil {
		log.Fatal(err)
	}
	l, err = c.Acquire(ctx, "team-a.scheduler", client.AcquireRequest{Holder: "agent-2", TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after the release agent-2 holds it with token", l.FencingToken)

	_, err = c.Renew(ctx, "team-a.scheduler", client.RenewRequest{Holder: "agent-1", FencingToken: 1})
	fmt.Println("agent-1 renewing its old holding:", errors.Is(err, client.ErrLost))
	// Output:
	// agent-1 holds it with token 1
	// agent-2 is refused: held by agent-1
	// after the release agent-2 holds it with token 2
	// agent-1 renewing its old holding: true
}

func ExampleElector() {
	url, stop := exampleService()
	defer stop()
	c, err := client.New(url, client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// The Client's Elector holds the lease through the Client's shared
	// session, or with plain renewals where the service offers none.
	e, err := c.NewElector("team-a.scheduler", client.ElectorConfig{
		Holder: "agent-1", // default: hostname-pid
		Callbacks: client.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				token, _ := client.TokenFromContext(ctx)
				fmt.Println("leading with fencing token", token)
				// Do the leader's work here, passing token with every write
				// downstream, until ctx is done. Here: stop at once.
				cancel()
				<-ctx.Done()
			},
			OnStoppedLeading: func() { fmt.Println("stopped leading") },
			OnNewLeader:      func(holder string) { fmt.Println("leader:", holder) },
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Run(ctx); err != nil { // blocks until ctx is cancelled
		log.Fatal(err)
	}
	l, err := c.Get(context.Background(), "team-a.scheduler")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released on the way out:", !l.Held)
	// Output:
	// leader: agent-1
	// leading with fencing token 1
	// stopped leading
	// released on the way out: true
}

func ExampleClient_Watch() {
	url, stop := exampleService()
	defer stop()
	c, err := client.New(url, client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	st, err := c.Watch(ctx, "team-a.scheduler")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	ev, _ := st.Next() // the lease now: it never existed
	fmt.Println(ev.Type, ev.Lease.Name == "")

	if _, err := c.Acquire(ctx, "team-a.scheduler", client.AcquireRequest{Holder: "agent-1", TTL: 30 * time.Second}); err != nil {
		log.Fatal(err)
	}
	ev, err = st.Next()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ev.Type, ev.Lease.Holder, ev.Lease.FencingToken)
	// Output:
	// lease true
	// acquired agent-1 1
}

// ExampleElector_preemption: a standby of a higher priority asks the
// leader to step down; the leader saves its progress first, and the
// standby resumes from it.
func ExampleElector_preemption() {
	url, stop := exampleService()
	defer stop()
	c, err := client.New(url, client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done, leading := make(chan struct{}), make(chan struct{})

	// One Keeper holds the leases of both Electors, with plain renewals
	// of a 3s TTL: it renews them, and the Electors lead over it.
	k, err := client.NewKeeper(ctx, c, client.KeeperConfig{PlainRenewals: true, TTL: 3 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close()
	var primary *client.Elector
	primary, err = client.NewElector(k, "jobs.scheduler", client.ElectorConfig{
		Holder: "old", Priority: 1,
		Callbacks: client.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { close(leading); <-ctx.Done() },
			OnYieldRequested: func(ctx context.Context, to string) {
				// Save where the work stands; the Elector then steps down.
				if err := primary.Checkpoint(ctx, map[string]int{"offset": 812}); err != nil {
					log.Print(err)
				}
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	standby, err := client.NewElector(k, "jobs.scheduler", client.ElectorConfig{
		Holder: "new", Priority: 10, Preempt: true,
		Callbacks: client.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				cp, by := client.CheckpointFromContext(ctx)
				token, _ := client.TokenFromContext(ctx)
				fmt.Printf("new leads with token %d, resuming from %s (written by token %d)\n", token, cp, by)
				close(done)
				<-ctx.Done()
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = primary.Run(ctx) })
	<-leading
	wg.Go(func() { _ = standby.Run(ctx) })
	<-done
	cancel()
	wg.Wait()
	// Output: new leads with token 2, resuming from {"offset":812} (written by token 1)
}
