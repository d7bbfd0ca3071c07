package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/leasesvc/leasesvc/client"
)

// An operator ends a stuck leader's holding. It needs a service with
// authentication and an admin token, so it is compiled but not run.
func ExampleClient_Revoke() {
	c, err := client.New("https://leasesvc.example.com", client.Config{
		TokenSource: client.StaticToken(os.Getenv("LEASESVC_TOKEN")),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.Get(ctx, "team-a.scheduler")
	if err != nil {
		log.Fatal(err)
	}
	// Name the holding seen, so that a newer one is never revoked.
	r, err := c.Revoke(ctx, "team-a.scheduler", client.RevokeRequest{Reason: "stuck on a bad disk", FencingToken: l.FencingToken})
	switch {
	case errors.Is(err, client.ErrLost):
		fmt.Println("that holding has already ended")
	case errors.Is(err, client.ErrPermissionDenied):
		fmt.Println("this principal lacks the admin verb")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Printf("revoked %s's holding %d; the next one gets token %d\n", r.Holder, r.FencingToken, r.FencingToken+1)
	}
}
