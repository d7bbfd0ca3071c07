package googleauth_test

import (
	"context"
	"log"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/googleauth"
)

// An agent on Cloud Run calls a leasesvc on Cloud Run as its service
// account. It needs Google credentials, so it is compiled but not run.
func ExampleIDTokenSource() {
	ctx := context.Background()
	const url = "https://leasesvc-123456789012.europe-west1.run.app"
	ts, err := googleauth.IDTokenSource(ctx, url) // the audience is the service's URL
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.New(url, client.Config{TokenSource: ts})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Get(ctx, "team-a.scheduler"); err != nil {
		log.Fatal(err)
	}
}

// NewClient does the same in one call. It needs Google credentials, so it is
// compiled but not run.
func ExampleNewClient() {
	ctx := context.Background()
	c, err := googleauth.NewClient(ctx, "https://leasesvc-123456789012.europe-west1.run.app", client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	el, err := c.NewElector("team-a.scheduler", client.ElectorConfig{
		Callbacks: client.LeaderCallbacks{OnStartedLeading: func(ctx context.Context) { <-ctx.Done() }},
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(el.Run(ctx))
}
